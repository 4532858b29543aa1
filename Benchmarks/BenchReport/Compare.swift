import Foundation

/// `BenchReport --compare OLD.json NEW.json`: every figure of two reports side by side, with the
/// change, for comparing two commits (or two machines). Figures are matched by name, so reports
/// of different versions compare on what they have in common.
func compareReports(_ oldPath: String, _ newPath: String) throws {
    func read(_ path: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any] ?? [:]
    }
    let old = try read(oldPath)
    let new = try read(newPath)
    let oldFigures = figures(old["results"])
    let newFigures = figures(new["results"])
    print(
        "old: \(old["commit"] ?? "?") (\(old["generated"] ?? "?")), new: \(new["commit"] ?? "?") (\(new["generated"] ?? "?"))"
    )
    if let a = old["machine"] as? [String: String], let b = new["machine"] as? [String: String], a != b {
        print("The machines differ: \(a) vs \(b)")
    }
    let names = newFigures.keys.filter { oldFigures[$0] != nil }.sorted()
    let width = min(90, names.map(\.count).max() ?? 0)
    print("figure".padding(toLength: width, withPad: " ", startingAt: 0) + "  old          new          change")
    for name in names {
        let a = oldFigures[name]!
        let b = newFigures[name]!
        let change = a == 0 ? (b == 0 ? "" : "new") : String(format: "%+.1f %%", (b - a) / abs(a) * 100)
        print(
            name.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                + Chart.format(a).padding(toLength: 13, withPad: " ", startingAt: 0)
                + Chart.format(b).padding(toLength: 13, withPad: " ", startingAt: 0) + change
        )
    }
    let only = Set(oldFigures.keys).symmetricDifference(newFigures.keys).count
    if only > 0 { print("(\(only) figures are in only one of the reports)") }
    print("A difference under 10-20 % on a 2-core machine is within run-to-run noise: repeat before believing it.")
}

/// The numbers of a results tree by path, array elements named by their identifying fields
/// (`link.throughput[1024 ours].megabytesPerSecond`). Distributions (arrays of numbers) are left out.
private func figures(_ value: Any?, _ path: String = "") -> [String: Double] {
    switch value {
    case let object as [String: Any]:
        return object.reduce(into: [:]) { result, entry in
            result.merge(figures(entry.value, path.isEmpty ? entry.key : "\(path).\(entry.key)")) { a, _ in a }
        }
    case let array as [Any]:
        let identifying = [
            "payloadBytes", "sessions", "placement", "link", "fault", "mechanism", "scenario", "topology",
        ]
        return array.reduce(into: [:]) { result, element in
            guard let object = element as? [String: Any] else { return }
            let identity = identifying.compactMap { key in object[key].map { "\($0)" } }.joined(separator: " ")
            // The identifying numbers name the element; they are not figures.
            let rest = object.filter { !identifying.contains($0.key) }
            result.merge(figures(rest, "\(path)[\(identity)]")) { a, _ in a }
        }
    case let number as NSNumber:
        return [path: number.doubleValue]
    default:
        return [:]
    }
}
