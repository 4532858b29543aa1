// A crew checklist shared between the stations of a flight deck: the second app on the
// replicated store (issue 60), written against the public API alone. Each item is merged field by
// field, so the captain ticking an item and the first officer adding a remark to it while their
// stations were apart both keep their change.
import Foundation
import MultipeerSession
import MultipeerSync

/// One item of the checklist: a record of the store, merged field by field.
public struct ChecklistItem: SyncRecord, Equatable {
    public static var collectionName: String { "crew-checklist.item.v1" }
    public static var merge: SyncMerge { .fieldByField }

    /// `phase/name`, e.g. `before-start/fuel`: stable, so two stations adding one item write one
    /// record.
    public var id: String
    public var title: String
    /// Who ticked it, if anyone did.
    public var checkedBy: String?
    public var remark: String?

    public init(id: String, title: String, checkedBy: String? = nil, remark: String? = nil) {
        self.id = id
        self.title = title
        self.checkedBy = checkedBy
        self.remark = remark
    }
}

/// The checklist of one station: what the crew member at it does, and what the view shows.
public struct Checklist: Sendable {
    public let items: SyncCollection<ChecklistItem>
    /// Who works at this station (written into what they tick).
    public let member: String

    public init(store: SyncStore, member: String) {
        items = store.collection(ChecklistItem.self)
        self.member = member
    }

    /// Adds an item, or renames it.
    public func add(_ id: String, title: String) async throws {
        var item = try await items.record(id: id) ?? ChecklistItem(id: id, title: title)
        item.title = title
        try await items.put(item)
    }

    /// Ticks the item as done by this member, or clears the tick.
    public func check(_ id: String, done: Bool = true) async throws {
        guard var item = try await items.record(id: id) else { throw ChecklistError.noSuchItem(id) }
        item.checkedBy = done ? member : nil
        try await items.put(item)
    }

    /// Sets the item's remark (nil: clears it).
    public func remark(_ id: String, _ text: String?) async throws {
        guard var item = try await items.record(id: id) else { throw ChecklistError.noSuchItem(id) }
        item.remark = text
        try await items.put(item)
    }

    /// Removes the item, on every station.
    public func remove(_ id: String) async throws {
        try await items.delete(id: id)
    }

    /// The checklist as text, one line an item, in order of ids.
    public func render() async throws -> String {
        try await items.records().map(Self.line).joined(separator: "\n")
    }

    static func line(_ item: ChecklistItem) -> String {
        let box = item.checkedBy.map { "[x] \($0)" } ?? "[ ]"
        return "\(box) \(item.id): \(item.title)" + (item.remark.map { "  (\($0))" } ?? "")
    }
}

/// What a command could not do.
public enum ChecklistError: Error, CustomStringConvertible {
    case noSuchItem(String)

    public var description: String {
        switch self {
        case .noSuchItem(let id): "no item \(id) on the checklist (add it first)"
        }
    }
}

/// Runs one command line against `checklist`: `add ID TITLE...`, `check ID`, `uncheck ID`,
/// `remark ID TEXT...`, `remove ID`, `list`. Returns what to print.
public func run(_ line: String, on checklist: Checklist, store: SyncStore) async throws -> String {
    let words = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    guard let command = words.first else { return "" }
    let rest = words.dropFirst(2).joined(separator: " ")
    switch (command, words.count) {
    case ("add", 3...): try await checklist.add(words[1], title: rest)
    case ("check", 2): try await checklist.check(words[1])
    case ("uncheck", 2): try await checklist.check(words[1], done: false)
    case ("remark", 2...): try await checklist.remark(words[1], rest.isEmpty ? nil : rest)
    case ("remove", 2): try await checklist.remove(words[1])
    case ("list", 1): return try await checklist.render()
    case ("status", 1):
        let status = try await store.status()
        return status.isSynced ? "synced with every station met" : "syncing"
    default:
        return "commands: add ID TITLE, check ID, uncheck ID, remark ID [TEXT], remove ID, list, status"
    }
    return "ok"
}
