package import struct Foundation.UUID

/// What the registry of incoming transfers reads of one: the session's transfer (which writes
/// the file), or a test's value.
package protocol IncomingResourceRecord: Sendable {
    var offer: ResourceOffer { get }
    /// The incarnation of its sender that offered it.
    var incarnation: UInt64 { get }
    /// Whether it is under way on a link now (not waiting for its sender to offer it again).
    var isLinked: Bool { get }
}

/// The incoming resource transfers of a session, and the decisions about an offer, without I/O
/// (docs/PROTOCOL.md 3c): answered again (a transfer under way, offered again on a new link),
/// ended as it ended before (its END went with a link), refused (the session stopping, a sender
/// whose HELLO does not announce resources, no directory, the same file already under way from
/// the sender, too many from the sender at once), or begun, after what it supersedes: the same
/// file from the same sender under an earlier transfer ID that waits for an offer (its sender
/// restarted), and what the sender's earlier incarnation left. The shell (`Resources`) keeps it
/// under its registry's lock and carries the decisions out.
///
/// Generic over the transfer it keeps and the directory files go to, which it only hands back.
package struct IncomingResources<Transfer: IncomingResourceRecord, Directory: Sendable>: Sendable {
    /// A transfer, by its sender and its ID.
    package struct Key: Hashable, Sendable {
        package var peer: UUID
        package var transfer: UUID

        package init(peer: UUID, transfer: UUID) {
            self.peer = peer
            self.transfer = transfer
        }
    }

    /// Where this side puts incoming files.
    package enum Store: Sendable {
        /// No directory is configured.
        case none
        /// The directory could not be opened: offers end with this reason and text.
        case failed(ResourceEndReason, String)
        case ready(Directory)
    }

    /// What becomes of an offer.
    package enum Decision: Sendable {
        /// It is under way already: answer it on the link it came on.
        case again(Transfer)
        /// A new transfer, made and registered; it begins in the directory once those it
        /// supersedes (in turn) have ended and made their last writes.
        case begin(Transfer, in: Directory, superseding: [Transfer])
        /// Answered with RESOURCE_END at once.
        case end(ResourceEndReason, String)
    }

    /// Transfers from one sender under way at once.
    package let maximumPerSender: Int
    /// The transfers under way, or waiting for their sender to offer them again.
    package private(set) var transfers: [Key: Transfer] = [:]
    /// Per sender, transfers of an earlier incarnation (it restarted before they were whole):
    /// ended, but their last writes may be under way; the sender's next transfer begins after them.
    private var retiring: [UUID: [Transfer]] = [:]
    /// How the latest transfers ended, to answer an offer of one again with its END.
    private var ended: RememberedEnds<Key, ResourceEndReason>

    package init(maximumPerSender: Int, rememberedEnds: Int) {
        self.maximumPerSender = maximumPerSender
        ended = RememberedEnds(capacity: rememberedEnds)
    }

    /// `sender` offers `offer`. `senderTakesResources`: its HELLO announces resources;
    /// `sessionEnded`: the session is stopping; `make` makes the transfer, if one begins.
    package mutating func offered(
        _ offer: ResourceOffer,
        by sender: UUID,
        senderTakesResources: Bool,
        sessionEnded: Bool,
        store: Store,
        make: () -> Transfer
    ) -> Decision {
        let key = Key(peer: sender, transfer: offer.id)
        if let transfer = transfers[key] { return .again(transfer) }
        if let reason = ended[key] { return .end(reason, "this transfer ended here") }
        guard !sessionEnded else { return .end(.refused, "the session is stopping") }
        // (It could not take the WANTs: docs/PROTOCOL.md 3c. Told, not left waiting.)
        guard senderTakesResources else {
            return .end(
                .refused,
                "the sender's HELLO does not announce resources (features bit 0): a side takes resources only from a peer that does"
            )
        }
        let directory: Directory
        switch store {
        case .none: return .end(.refused, "the receiver has no resource directory")
        case .failed(let reason, let text): return .end(reason, text)
        case .ready(let ready): directory = ready
        }
        // The same file from the same sender under another transfer ID: under way on a link
        // (sent twice at once), it keeps the partial file and this offer is refused; waiting
        // for an offer (its sender restarted), it is superseded by this one.
        let sameFile = transfers.filter {
            $0.key.peer == sender && $0.value.offer.sha256 == offer.sha256 && $0.value.offer.length == offer.length
        }
        if sameFile.values.contains(where: \.isLinked) {
            return .end(.refused, "the same file from this sender is under way in another transfer")
        }
        for key in sameFile.keys { transfers.removeValue(forKey: key) }
        guard transfers.keys.count(where: { $0.peer == sender }) < maximumPerSender else {
            return .end(.refused, "\(maximumPerSender) transfers from this sender are under way, the receiver's limit")
        }
        let superseded = sameFile.sorted { $0.key.transfer.uuidString < $1.key.transfer.uuidString }.map(\.value)
        let transfer = make()
        transfers[key] = transfer
        return .begin(transfer, in: directory, superseding: superseded + (retiring.removeValue(forKey: sender) ?? []))
    }

    /// The transfer `id` from `sender`, if it is under way or waiting.
    package func transfer(_ id: UUID, from sender: UUID) -> Transfer? {
        transfers[Key(peer: sender, transfer: id)]
    }

    /// The sender's transfers under way or waiting.
    package func transfers(from sender: UUID) -> [Transfer] {
        transfers.filter { $0.key.peer == sender }.map(\.value)
    }

    /// The transfer went: ended for `reason` (remembered, to answer an offer of it again), or
    /// without one (superseded or retired: nothing to answer).
    package mutating func transferEnded(_ key: Key, reason: ResourceEndReason?) {
        transfers.removeValue(forKey: key)
        if let reason { ended.remember(key, reason) }
    }

    /// The sender is active as `incarnation`: its transfers from other incarnations are not
    /// under way any more. Returns them, to retire; its next transfer begins after them.
    package mutating func senderActive(_ sender: UUID, incarnation: UInt64) -> [Transfer] {
        let retired = transfers.filter { $0.key.peer == sender && $0.value.incarnation != incarnation }
        for key in retired.keys { transfers.removeValue(forKey: key) }
        let transfers = retired.sorted { $0.key.transfer.uuidString < $1.key.transfer.uuidString }.map(\.value)
        retiring[sender, default: []] += transfers
        return transfers
    }
}
