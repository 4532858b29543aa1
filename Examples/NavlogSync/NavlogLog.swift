import Foundation
import MultipeerSession
import MultipeerSync

/// The log as a store keeps it: the records of `navlog.entries`, read as the entries a host
/// shows, each with who wrote its version.
struct NavlogLog: Sendable {
    let store: SyncStore
    let records: SyncCollection<NavlogRecord>

    init(store: SyncStore) {
        self.store = store
        records = store.collection(NavlogRecord.self)
    }

    /// The live entries in log order. A record a user could not have typed
    /// (``NavlogRecord/validate()``) is left out: it was reported when it came.
    func entries() async throws(NavlogError) -> [NavlogEntry] {
        let versions: [SyncVersion<NavlogRecord>]
        do {
            versions = try await records.versions()
        } catch {
            throw NavlogError(.databaseFailure, "the log cannot be read: \(error.message)")
        }
        var keys: [UUID: PeerKey?] = [:]
        var entries: [NavlogEntry] = []
        for version in versions where !version.record.deleted && (try? version.record.validate()) != nil {
            if let entry = version.record.entry(stamp: version.stamp, key: await key(of: version.stamp.origin, &keys)) {
                entries.append(entry)
            }
        }
        return entries.sorted(by: NavlogEntry.logOrder)
    }

    /// The entry `change` made, as a host shows it (nil: the record was deleted from the store,
    /// which navlog-sync never does).
    func entry(of change: SyncChange<NavlogRecord>) async -> NavlogEntry? {
        var keys: [UUID: PeerKey?] = [:]
        return change.record?.entry(stamp: change.stamp, key: await key(of: change.origin, &keys))
    }

    /// The key of `origin`, read once per call into `keys`.
    private func key(of origin: UUID, _ keys: inout [UUID: PeerKey?]) async -> PeerKey? {
        if let known = keys[origin] { return known }
        let key = try? await store.key(of: origin)
        keys[origin] = key
        return key
    }
}
