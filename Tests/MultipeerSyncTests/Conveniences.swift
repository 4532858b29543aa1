@testable import MultipeerSync

extension Station {
    /// One write, in a commit of its own.
    mutating func write(
        _ change: RecordWrite.Change,
        to record: RecordKey,
        now: UInt64
    ) throws(SyncError) -> RecordChange {
        try write([(record, change)], now: now).changes[0]
    }
}

extension SyncStorage {
    /// The versions kept of one record.
    func versions(of record: RecordKey) throws(SyncError) -> [SignedVersion] {
        try versions(of: [record])[record] ?? []
    }
}
