import Foundation

/// Small SVG charts for the report: grouped bars and lines, drawn by hand (no dependency), in
/// a fixed palette that reads on light and dark backgrounds.
struct Chart {
    /// A named series of values, one per category (bars) or per x position (lines); nil is a gap.
    struct Series {
        var name: String
        var values: [Double?]
    }

    var title: String
    var unit: String
    var categories: [String]
    var series: [Series]
    /// A logarithmic value axis (for figures spanning orders of magnitude).
    var logarithmic = false
    /// A dashed horizontal line, e.g. a target.
    var reference: (value: Double, label: String)?
    /// Bars whose value is nil are drawn as this note instead (e.g. "not detected").
    var missingNote = "n/a"

    static let palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"]

    private let width = 760.0, height = 360.0
    private let left = 70.0, right = 20.0, top = 40.0, bottom = 80.0

    init(title: String, unit: String, categories: [String], series: [Series]) {
        self.title = title
        self.unit = unit
        self.categories = categories
        self.series = series
    }

    private var plotWidth: Double { width - left - right }
    private var plotHeight: Double { height - top - bottom }

    private var allValues: [Double] {
        series.flatMap { $0.values.compactMap { $0 } } + (reference.map { [$0.value] } ?? [])
    }

    /// The axis range and its ticks.
    private var axis: (low: Double, high: Double, ticks: [Double]) {
        let values = allValues.filter { !logarithmic || $0 > 0 }
        guard let maximum = values.max(), maximum > 0 else { return (0, 1, [0, 1]) }
        if logarithmic {
            let low = pow(10, floor(log10(values.min()!)))
            let high = pow(10, ceil(log10(maximum)))
            let ticks = stride(from: log10(low), through: log10(high), by: 1).map { pow(10, $0) }
            return (low, high, ticks)
        }
        let rough = maximum * 1.1 / 5
        let magnitude = pow(10, floor(log10(rough)))
        let step = [1.0, 2, 2.5, 5, 10].map { $0 * magnitude }.first { $0 >= rough }!
        let high = ceil(maximum * 1.1 / step) * step
        return (0, high, stride(from: 0, through: high, by: step).map { $0 })
    }

    private func y(_ value: Double) -> Double {
        let (low, high, _) = axis
        let fraction =
            logarithmic
            ? (log10(max(value, low)) - log10(low)) / (log10(high) - log10(low)) : (value - low) / (high - low)
        return top + plotHeight * (1 - fraction)
    }

    static func format(_ value: Double) -> String {
        if value == 0 { return "0" }
        if abs(value) >= 100 { return String(format: "%.0f", value) }
        if abs(value) >= 10 { return String(format: "%.1f", value) }
        if abs(value) >= 1 { return String(format: "%.2f", value) }
        return String(format: "%.3g", value)
    }

    private func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    /// The frame: title, value axis with grid, legend, reference line.
    private func frame(_ body: String) -> String {
        var svg = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(left)" y="20" font-size="15" font-weight="bold">\(escape(title))</text>

            """
        for tick in axis.ticks {
            svg += "<line x1=\"\(left)\" x2=\"\(width - right)\" y1=\"\(y(tick))\" y2=\"\(y(tick))\" stroke=\"#ddd\"/>"
            svg += "<text x=\"\(left - 6)\" y=\"\(y(tick) + 4)\" text-anchor=\"end\">\(Self.format(tick))</text>\n"
        }
        svg +=
            "<text transform=\"translate(16 \(top + plotHeight / 2)) rotate(-90)\" text-anchor=\"middle\">\(escape(unit))</text>\n"
        svg += body
        if let reference {
            svg +=
                "<line x1=\"\(left)\" x2=\"\(width - right)\" y1=\"\(y(reference.value))\" y2=\"\(y(reference.value))\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/>"
            svg +=
                "<text x=\"\(width - right)\" y=\"\(y(reference.value) - 5)\" text-anchor=\"end\" fill=\"#d62728\">\(escape(reference.label))</text>\n"
        }
        var x = left
        for (index, item) in series.enumerated() where series.count > 1 {
            svg +=
                "<rect x=\"\(x)\" y=\"\(height - 22)\" width=\"12\" height=\"12\" fill=\"\(Self.palette[index % Self.palette.count])\"/>"
            svg += "<text x=\"\(x + 16)\" y=\"\(height - 12)\">\(escape(item.name))</text>\n"
            x += 28 + Double(item.name.count) * 7
        }
        return svg + "</svg>\n"
    }

    /// Grouped bars: one group per category, one bar per series, each labelled with its value.
    func bars() -> String {
        var body = ""
        let group = plotWidth / Double(max(categories.count, 1))
        let bar = min(48, group * 0.8 / Double(max(series.count, 1)))
        for (c, category) in categories.enumerated() {
            let start = left + group * Double(c) + (group - bar * Double(series.count)) / 2
            for (s, item) in series.enumerated() {
                let x = start + bar * Double(s)
                if let value = item.values[c] {
                    let top = y(value)
                    body +=
                        "<rect x=\"\(x)\" y=\"\(top)\" width=\"\(bar - 2)\" height=\"\(self.top + plotHeight - top)\" fill=\"\(Self.palette[s % Self.palette.count])\"/>"
                    body +=
                        "<text x=\"\(x + bar / 2)\" y=\"\(top - 3)\" text-anchor=\"middle\" font-size=\"10\">\(Self.format(value))</text>\n"
                } else {
                    body +=
                        "<text transform=\"translate(\(x + bar / 2) \(top + plotHeight - 4)) rotate(-90)\" font-size=\"10\" fill=\"#555\">\(escape(missingNote))</text>\n"
                }
            }
            body +=
                "<text x=\"\(left + group * (Double(c) + 0.5))\" y=\"\(top + plotHeight + 16)\" text-anchor=\"middle\">\(escape(category))</text>\n"
        }
        return frame(body)
    }

    /// Lines: the categories are evenly spaced x positions.
    func lines() -> String {
        var body = ""
        let step = plotWidth / Double(max(categories.count - 1, 1))
        for (c, category) in categories.enumerated() {
            body +=
                "<text x=\"\(left + step * Double(c))\" y=\"\(top + plotHeight + 16)\" text-anchor=\"middle\">\(escape(category))</text>\n"
        }
        for (s, item) in series.enumerated() {
            let points = item.values.enumerated().compactMap { index, value in
                value.map { "\(left + step * Double(index)),\(y($0))" }
            }
            body +=
                "<polyline fill=\"none\" stroke=\"\(Self.palette[s % Self.palette.count])\" stroke-width=\"2\" points=\"\(points.joined(separator: " "))\"/>\n"
        }
        return frame(body)
    }
}
