import Foundation
import MultipeerCore
import Testing

/// What becomes of a resource offer, decided without I/O (docs/PROTOCOL.md 3c).
@Suite struct IncomingResourcesTests {
    struct Transfer: IncomingResourceRecord, Equatable {
        var offer: ResourceOffer
        var incarnation: UInt64 = 1
        var isLinked = true
    }

    typealias Registry = IncomingResources<Transfer, String>

    static let sender = UUID(uuidString: "10000000-0000-0000-0000-000000000000")!

    static func offer(_ id: Int, file: UInt8 = 1) -> ResourceOffer {
        try! ResourceOffer(
            id: UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", id))!,
            name: "chart.pdf",
            length: 1_000,
            sha256: [UInt8](repeating: file, count: 32)
        )
    }

    /// `offer` from ``sender`` into a ready directory "dir"; a transfer it begins is `made`.
    static func offered(
        _ offer: ResourceOffer,
        to registry: inout Registry,
        takesResources: Bool = true,
        sessionEnded: Bool = false,
        store: Registry.Store = .ready("dir"),
        made: Transfer? = nil
    ) -> Registry.Decision {
        registry.offered(
            offer,
            by: sender,
            senderTakesResources: takesResources,
            sessionEnded: sessionEnded,
            store: store
        ) { made ?? Transfer(offer: offer) }
    }

    static func began(_ decision: Registry.Decision) -> (Transfer, String, [Transfer])? {
        if case .begin(let transfer, let directory, let superseded) = decision {
            (transfer, directory, superseded)
        } else {
            nil
        }
    }

    static func ended(_ decision: Registry.Decision) -> ResourceEndReason? {
        if case .end(let reason, _) = decision { reason } else { nil }
    }

    @Test func anOfferBeginsOnceAndIsAnsweredAgainWhileUnderWay() throws {
        var registry = Registry(maximumPerSender: 8, rememberedEnds: 4)
        let (transfer, directory, superseded) = try #require(Self.began(Self.offered(Self.offer(1), to: &registry)))
        #expect(transfer.offer == Self.offer(1) && directory == "dir" && superseded.isEmpty)
        guard case .again(let again) = Self.offered(Self.offer(1), to: &registry) else {
            Issue.record("an offer under way was not answered again")
            return
        }
        #expect(again == transfer)
    }

    @Test func anOfferOfATransferThatEndedIsAnsweredWithItsEnd() {
        var registry = Registry(maximumPerSender: 8, rememberedEnds: 1)
        _ = Self.offered(Self.offer(1), to: &registry)
        registry.transferEnded(.init(peer: Self.sender, transfer: Self.offer(1).id), reason: .complete)
        #expect(Self.ended(Self.offered(Self.offer(1), to: &registry)) == .complete, "its END went with a link")
        _ = Self.offered(Self.offer(2, file: 2), to: &registry)
        registry.transferEnded(.init(peer: Self.sender, transfer: Self.offer(2).id), reason: .cancelled)
        #expect(Self.began(Self.offered(Self.offer(1), to: &registry)) != nil, "one end remembered: begun anew")
    }

    @Test func offersAreRefusedWithTheReasonThatHolds() {
        var registry = Registry(maximumPerSender: 8, rememberedEnds: 4)
        #expect(Self.ended(Self.offered(Self.offer(1), to: &registry, sessionEnded: true)) == .refused)
        #expect(Self.ended(Self.offered(Self.offer(1), to: &registry, takesResources: false)) == .refused)
        #expect(Self.ended(Self.offered(Self.offer(1), to: &registry, store: .none)) == .refused)
        #expect(
            Self.ended(Self.offered(Self.offer(1), to: &registry, store: .failed(.unwritable, "cannot write")))
                == .unwritable
        )
        #expect(registry.transfers.isEmpty, "nothing begun")
    }

    /// The same file under another ID: refused while the first is under way on a link,
    /// superseding it while it waits for its sender (which restarted and made a new ID).
    @Test func theSameFileUnderAnotherIDIsRefusedWhileUnderWayAndSupersedesItOtherwise() throws {
        var registry = Registry(maximumPerSender: 8, rememberedEnds: 4)
        _ = Self.offered(Self.offer(1), to: &registry)
        #expect(Self.ended(Self.offered(Self.offer(2), to: &registry)) == .refused, "sent twice at once")

        var waiting = Registry(maximumPerSender: 8, rememberedEnds: 4)
        let old = Transfer(offer: Self.offer(1), isLinked: false)
        _ = Self.offered(Self.offer(1), to: &waiting, made: old)
        let (_, _, superseded) = try #require(Self.began(Self.offered(Self.offer(2), to: &waiting)))
        #expect(superseded == [old])
        #expect(waiting.transfer(Self.offer(1).id, from: Self.sender) == nil)
    }

    @Test func aSenderHasAtMostItsLimitUnderWay() {
        var registry = Registry(maximumPerSender: 2, rememberedEnds: 4)
        _ = Self.offered(Self.offer(1, file: 1), to: &registry)
        _ = Self.offered(Self.offer(2, file: 2), to: &registry)
        #expect(Self.ended(Self.offered(Self.offer(3, file: 3), to: &registry)) == .refused)
        registry.transferEnded(.init(peer: Self.sender, transfer: Self.offer(1).id), reason: nil)
        #expect(Self.began(Self.offered(Self.offer(3, file: 3), to: &registry)) != nil)
    }

    /// A sender back as a new incarnation: its earlier transfers are retired, and its next one
    /// begins after them.
    @Test func aRestartedSendersEarlierTransfersAreRetiredAndItsNextBeginsAfterThem() throws {
        var registry = Registry(maximumPerSender: 8, rememberedEnds: 4)
        let old = Transfer(offer: Self.offer(1), incarnation: 1)
        _ = Self.offered(Self.offer(1), to: &registry, made: old)
        #expect(registry.senderActive(Self.sender, incarnation: 1).isEmpty, "the same incarnation")
        #expect(registry.senderActive(Self.sender, incarnation: 2) == [old])
        #expect(registry.transfers(from: Self.sender).isEmpty)
        let (_, _, after) = try #require(
            Self.began(
                Self.offered(
                    Self.offer(2, file: 2),
                    to: &registry,
                    made: Transfer(offer: Self.offer(2), incarnation: 2)
                )
            )
        )
        #expect(after == [old])
        let (_, _, next) = try #require(Self.began(Self.offered(Self.offer(3, file: 3), to: &registry)))
        #expect(next.isEmpty, "after them once")
    }
}
