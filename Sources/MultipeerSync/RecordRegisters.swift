/// One write of a record, as the merge sees it (docs/SYNC.md, 2): what it set, and when.
package struct RecordWrite: Hashable, Sendable {
    /// What a write does to its record.
    package enum Change: Hashable, Sendable {
        /// Sets these fields (by name) to these encoded values; the others keep theirs. A
        /// collection merged as a whole record sets one field, ``RecordRegisters/wholeRecord``.
        case set([String: [UInt8]])
        /// Deletes the record: every field written before it is gone (a tombstone).
        case delete
    }

    package var stamp: VersionStamp
    package var change: Change

    package init(stamp: VersionStamp, change: Change) {
        self.stamp = stamp
        self.change = change
    }
}

/// What a station knows of one record: a last-writer-wins register per field and one for its
/// deletion, each keeping the latest write it was told of. Merging takes the later of each pair,
/// so the result is the same whatever the order, grouping or repetition of what was merged
/// (commutative, associative, idempotent: a join semilattice), and every station that took the
/// same writes holds the same record.
///
/// Last writer wins for the whole record is the case of one field (``wholeRecord``); field by
/// field, two stations that changed different fields both keep their change. A delete hides
/// every field written before it; a field written after it brings the record back with the
/// fields written since. Two writes of one field with one stamp (which no correct station makes)
/// are ordered by their values' bytes, so even then the order is total.
package struct RecordRegisters: Hashable, Sendable {
    /// The field a collection merged as a whole record keeps its encoded record in.
    package static let wholeRecord = ""

    /// A field's latest write.
    package struct Field: Hashable, Sendable {
        package var stamp: VersionStamp
        package var value: [UInt8]

        /// Whether this write wins over `other`, a write of the same field.
        func wins(over other: Field) -> Bool {
            if stamp != other.stamp { return stamp > other.stamp }
            return other.value.lexicographicallyPrecedes(value)
        }
    }

    package private(set) var fields: [String: Field] = [:]
    /// The latest delete, if any.
    package private(set) var deleted: VersionStamp?

    package init() {}

    /// Takes in one write; returns whether it changed anything (false for one already taken, or
    /// one older than what it would replace).
    @discardableResult
    package mutating func apply(_ write: RecordWrite) -> Bool {
        switch write.change {
        case .delete:
            guard deleted.map({ write.stamp > $0 }) ?? true else { return false }
            deleted = write.stamp
            return true
        case .set(let values):
            var changed = false
            for (name, value) in values { changed = take(Field(stamp: write.stamp, value: value), as: name) || changed }
            return changed
        }
    }

    /// Takes in everything `other` knows of the same record.
    package mutating func merge(_ other: RecordRegisters) {
        if let stamp = other.deleted { apply(RecordWrite(stamp: stamp, change: .delete)) }
        for (name, field) in other.fields { take(field, as: name) }
    }

    @discardableResult
    private mutating func take(_ field: Field, as name: String) -> Bool {
        guard fields[name].map({ field.wins(over: $0) }) ?? true else { return false }
        fields[name] = field
        return true
    }

    /// The record as the application sees it: the fields written after its latest delete, or
    /// nil if there are none (deleted, or never written).
    package var visible: [String: [UInt8]]? {
        let live = fields.filter { name, field in deleted.map { field.stamp > $0 } ?? true }
        return live.isEmpty ? nil : live.mapValues(\.value)
    }

    /// The latest write of any kind: what a station compares to tell whether it holds the
    /// record's newest state.
    package var latest: VersionStamp? {
        ([deleted] + fields.values.map(\.stamp)).compactMap { $0 }.max()
    }
}

extension RecordRegisters {
    /// Whether `write` still holds one of these registers: the latest delete, or the latest write
    /// of a field that no later delete hides. A version whose write holds none is superseded:
    /// nothing it says can show again, and a station lets it go (docs/SYNC.md 2).
    package func isHeld(by write: RecordWrite) -> Bool {
        switch write.change {
        case .delete:
            return deleted == write.stamp
        case .set(let values):
            guard deleted.map({ write.stamp > $0 }) ?? true else { return false }
            return values.contains { name, value in fields[name] == Field(stamp: write.stamp, value: value) }
        }
    }
}
