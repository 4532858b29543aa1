/// What taking versions of one record does (docs/SYNC.md 2): the versions a station keeps from
/// now on, those it lets go (superseded: nothing they say can show again), and the record as
/// the application sees it before and after. Sans-IO: the storage carries it out in one commit.
package struct RecordIntake: Sendable {
    /// New versions that hold a register: to store.
    package private(set) var added: [SignedVersion] = []
    /// Versions kept until now that hold none any more: to let go.
    package private(set) var removed: [SignedVersion] = []
    /// The record's fields as the application saw them, and sees them now (nil: absent).
    package let before: [String: [UInt8]]?
    package let after: [String: [UInt8]]?
    /// The registers once everything was taken.
    package let registers: RecordRegisters

    /// Takes `incoming` (versions of one record, already checked) beside `kept`, the versions a
    /// station holds of it, and `collected`, the stamp of its delete this station collected
    /// (docs/SYNC.md 8), which still holds the delete register. A version taken before, one
    /// that holds no register once everything is merged (an older write of every field it
    /// sets), or one no later than the collected delete, is not added.
    package init(taking incoming: [SignedVersion], kept: [SignedVersion], collected: VersionStamp? = nil) {
        var registers = RecordRegisters()
        if let collected { registers.apply(RecordWrite(stamp: collected, change: .delete)) }
        for version in kept { registers.apply(version.write) }
        before = registers.visible
        for version in incoming { registers.apply(version.write) }
        after = registers.visible
        self.registers = registers
        let keptIDs = Set(kept.map(\.id))
        var seen = keptIDs
        for version in incoming
        where registers.isHeld(by: version.write) && collected.map({ version.stamp > $0 }) ?? true
            && seen.insert(version.id).inserted
        {
            added.append(version)
        }
        removed = kept.filter { !registers.isHeld(by: $0.write) }
    }

    /// Whether the application sees the record differently now.
    package var changed: Bool { before != after }
}
