/// One line of input to `navlog-sync run`, parsed.
public enum NavlogCommand: Hashable, Sendable {
    case add([NavlogField: String?])
    /// Changes fields of the entry whose id starts with the given text.
    case edit(idPrefix: String, [NavlogField: String?])
    case delete(idPrefix: String)
    /// Attaches the file at the path to the entry whose id starts with the given text.
    case attach(idPrefix: String, path: String)
    /// Writes the entry's attachment of this name to the path.
    case save(idPrefix: String, name: String, path: String)
    case list
    case peers
    case quit

    public static let usage =
        "commands: add KEY=VALUE ..., edit ID KEY=VALUE ..., delete ID, attach ID FILE, save ID NAME PATH, list, peers, quit; "
        + "keys: \(NavlogField.allCases.map(\.rawValue).joined(separator: ", ")); quote values with spaces: remarks=\"light chop\""

    /// Parses a line; nil for a blank line or a comment (`#`).
    public init?(line: String) throws(NavlogError) {
        let words = try Self.split(line)
        guard let verb = words.first?.lowercased(), !verb.hasPrefix("#") else { return nil }
        let rest = Array(words.dropFirst())
        switch verb {
        case "add":
            let fields = try Self.fields(rest)
            guard case let waypoint?? = fields[.waypoint], !waypoint.isEmpty else {
                throw NavlogError(.badCommand, "add needs waypoint=NAME")
            }
            self = .add(fields)
        case "edit":
            guard let id = rest.first else {
                throw NavlogError(.badCommand, "edit needs an entry id: edit ID KEY=VALUE ...")
            }
            let fields = try Self.fields(Array(rest.dropFirst()))
            guard !fields.isEmpty else { throw NavlogError(.badCommand, "edit needs at least one KEY=VALUE") }
            self = .edit(idPrefix: id, fields)
        case "delete":
            guard rest.count == 1 else { throw NavlogError(.badCommand, "delete takes one entry id: delete ID") }
            self = .delete(idPrefix: rest[0])
        case "attach":
            guard rest.count == 2 else {
                throw NavlogError(.badCommand, "attach takes an entry id and a file: attach ID FILE")
            }
            self = .attach(idPrefix: rest[0], path: rest[1])
        case "save":
            guard rest.count == 3 else {
                throw NavlogError(
                    .badCommand,
                    "save takes an entry id, an attachment's name and where to write it: save ID NAME PATH"
                )
            }
            self = .save(idPrefix: rest[0], name: rest[1], path: rest[2])
        case "list", "peers", "quit":
            guard rest.isEmpty else { throw NavlogError(.badCommand, "\(verb) takes no arguments") }
            self = verb == "list" ? .list : verb == "peers" ? .peers : .quit
        default:
            throw NavlogError(.badCommand, "unknown command \"\(verb)\"; \(Self.usage)")
        }
    }

    /// `KEY=VALUE` words; an empty value clears the field.
    private static func fields(_ words: [String]) throws(NavlogError) -> [NavlogField: String?] {
        var fields: [NavlogField: String?] = [:]
        for word in words {
            guard let equals = word.firstIndex(of: "=") else {
                throw NavlogError(.badCommand, "\"\(word)\" is not KEY=VALUE; \(usage)")
            }
            let key = String(word[..<equals]).lowercased()
            guard let field = NavlogField(rawValue: key) ?? NavlogField.aliases[key] else {
                throw NavlogError(
                    .badCommand,
                    "unknown key \"\(key)\"; keys: \(NavlogField.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            let value = String(word[word.index(after: equals)...])
            try field.validate(value)
            fields[field] = value.isEmpty ? .some(nil) : value
        }
        return fields
    }

    /// Splits on spaces, keeping "double quoted" text (with \" and \\ escapes) together.
    static func split(_ line: String) throws(NavlogError) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quoted = false
        var iterator = line.makeIterator()
        while let character = iterator.next() {
            switch character {
            case "\"":
                quoted.toggle()
                inWord = true
            case "\\" where quoted:
                guard let next = iterator.next() else { throw NavlogError(.badCommand, "a line cannot end in \\") }
                word.append(next)
            case _ where character.isWhitespace && !quoted:
                if inWord { words.append(word) }
                word = ""
                inWord = false
            default:
                word.append(character)
                inWord = true
            }
        }
        guard !quoted else { throw NavlogError(.badCommand, "a quote is not closed") }
        if inWord { words.append(word) }
        return words
    }
}

/// The fields a command can set, by their names on the command line.
public enum NavlogField: String, CaseIterable, Hashable, Sendable {
    case leg, waypoint, planned, actual, fuel, altitude, remarks

    static let aliases: [String: NavlogField] = ["wpt": .waypoint, "alt": .altitude, "eta": .planned, "ata": .actual]

    /// Checks a value typed for this field; an empty value (clearing it) is fine but for the waypoint.
    func validate(_ value: String) throws(NavlogError) {
        // SQLite would cut a text short at a NUL, and a terminal obeys escape sequences.
        guard !value.unicodeScalars.contains(where: \.isControl) else {
            throw bad(value, "text without control characters")
        }
        if value.isEmpty {
            guard self != .waypoint else { throw NavlogError(.badCommand, "the waypoint cannot be empty") }
            return
        }
        switch self {
        case .leg:
            guard let leg = Int(value), (1...999).contains(leg) else { throw bad(value, "a leg number from 1 to 999") }
        case .waypoint:
            guard value.utf8.count <= 32 else { throw bad(value, "a waypoint name of at most 32 bytes") }
        case .planned, .actual:
            guard Self.isTime(value) else { throw bad(value, "a UTC time HH:MM, e.g. 14:05") }
        case .fuel:
            guard let fuel = Int(value), (0...500_000).contains(fuel) else {
                throw bad(value, "kilograms of fuel from 0 to 500000")
            }
        case .altitude:
            guard let altitude = Int(value), (-2_000...60_000).contains(altitude) else {
                throw bad(value, "feet from -2000 to 60000")
            }
        case .remarks:
            guard value.utf8.count <= 500 else { throw bad(value, "remarks of at most 500 bytes") }
        }
    }

    private func bad(_ value: String, _ expected: String) -> NavlogError {
        let shown = value.count > 40 ? value.prefix(40) + "..." : Substring(value)
        let escaped = shown.unicodeScalars.map {
            $0.isControl ? "\\u{\(String($0.value, radix: 16, uppercase: true))}" : String($0)
        }.joined()
        return NavlogError(.badCommand, "\(rawValue)=\(escaped) is not valid: expected \(expected)")
    }

    private static func isTime(_ value: String) -> Bool {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ $0.count == 2 }), let hours = Int(parts[0]),
            let minutes = Int(parts[1])
        else {
            return false
        }
        return (0..<24).contains(hours) && (0..<60).contains(minutes)
    }
}

extension Unicode.Scalar {
    /// A C0 or C1 control character, or DEL.
    var isControl: Bool { properties.generalCategory == .control }
}

extension NavlogFields {
    /// Each field that is set, as it would be typed.
    var typed: [NavlogField: String] {
        let values: [NavlogField: String?] = [
            .leg: leg.map(String.init), .waypoint: waypoint, .planned: planned, .actual: actual,
            .fuel: fuel.map(String.init), .altitude: altitude.map(String.init), .remarks: remarks,
        ]
        return values.compactMapValues { $0 }
    }

    /// Checks every field as a typed value is checked (``NavlogField``'s rules): a version
    /// from a peer must hold only what a user could have typed.
    public func validate() throws(NavlogError) {
        for field in NavlogField.allCases {
            if let value = typed[field] { try field.validate(value) }
        }
    }

    /// These fields with the given (already validated) changes applied; nil clears a field.
    public func applying(_ changes: [NavlogField: String?]) -> NavlogFields {
        var fields = self
        for (field, value) in changes {
            switch field {
            case .leg: fields.leg = value.flatMap { Int($0) }
            case .waypoint: fields.waypoint = value ?? fields.waypoint
            case .planned: fields.planned = value
            case .actual: fields.actual = value
            case .fuel: fields.fuel = value.flatMap { Int($0) }
            case .altitude: fields.altitude = value.flatMap { Int($0) }
            case .remarks: fields.remarks = value
            }
        }
        return fields
    }
}
