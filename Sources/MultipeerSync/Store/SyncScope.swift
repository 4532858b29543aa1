/// Which collections a station keeps (``SyncStore/Configuration/keeps``): what it takes from
/// its peers, stores, relays and reconciles (docs/SYNC.md 6).
///
/// By default a station keeps every collection, read or not, so a station in the middle of a
/// chain carries what its ends write though it reads none of it. One that should not (a
/// small device that shows one collection, say) keeps only those it names:
///
/// ```swift
/// var configuration = SyncStore.Configuration()
/// configuration.keeps = .only(["checklist"])
/// ```
///
/// Two stations then reconcile only the collections both keep, and neither relays the other a
/// version of a collection the other does not keep (a station's own writes go to every peer,
/// so that one away gets them when it is back: a peer that does not keep their collection
/// leaves them). Of a collection it no longer keeps, a station keeps what it held (its reads
/// still see it) but takes, sends and writes nothing more.
public enum SyncScope: Hashable, Sendable {
    /// Every collection (the default).
    case everything
    /// The collections named, by ``SyncRecord/collectionName`` (each 1 to 255 bytes of UTF-8,
    /// at most 1,024 of them: docs/SYNC.md 5).
    case only(Set<String>)

    /// Whether the scope holds `collection`.
    public func contains(_ collection: String) -> Bool {
        switch self {
        case .everything: true
        case .only(let collections): collections.contains(collection)
        }
    }

    /// The collections both scopes hold.
    public func intersection(_ other: SyncScope) -> SyncScope {
        switch (self, other) {
        case (.everything, _): other
        case (_, .everything): self
        case (.only(let ours), .only(let theirs)): .only(ours.intersection(theirs))
        }
    }

    /// The collections named, nil for every collection.
    package var collections: Set<String>? {
        if case .only(let collections) = self { collections } else { nil }
    }
}
