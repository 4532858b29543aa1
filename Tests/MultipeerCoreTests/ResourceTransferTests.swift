import Foundation
import MultipeerCore
import NIOCore
import Testing

@Suite struct ResourceTransferTests {
    static let offer = try! ResourceOffer(
        id: UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")!,
        name: "chart.pdf",
        length: 10_000,
        sha256: Array(repeating: 0xAB, count: 32),
        metadata: ["entry": "7"]
    )

    /// A sender and a receiver joined by a link that carries their frames in order, the receiver
    /// writing each chunk at once; counts the bytes of chunks on the wire.
    struct Pair {
        var sender = ResourceSendStateMachine(offer: offer)
        var receiver: ResourceReceiveStateMachine
        var chunkSize: UInt64 = 1_000
        var bytesOnWire: UInt64 = 0
        var senderFinished: ResourceSendStateMachine.Action?
        var receiverFinished: ResourceReceiveStateMachine.Action?

        init(window: UInt64 = 2_000) {
            receiver = ResourceReceiveStateMachine(offer: offer, window: window)
        }

        /// What the receiver does with `actions`: WANTs and ENDs reach the sender; a write is done
        /// at once; a check passes (`hashMatches`).
        mutating func receiverDoes(_ actions: [ResourceReceiveStateMachine.Action], hashMatches: Bool = true) throws {
            for action in actions {
                switch action {
                case .sendWant(let received, let granted):
                    try senderDoes([try sender.want(received: received, granted: granted)])
                case .write(let offset, let count):
                    try receiverDoes([receiver.wrote(through: offset + count)], hashMatches: hashMatches)
                case .verify: try receiverDoes(receiver.verified(hashMatches))
                case .sendEnd(let reason): try senderDoes([sender.ended(reason)])
                case .finish: receiverFinished = action
                case .none: break
                }
            }
        }

        mutating func senderDoes(_ actions: [ResourceSendStateMachine.Action]) throws {
            for action in actions {
                switch action {
                case .sendOffer: try receiverDoes(receiver.offeredAgain())
                case .sendEnd(let reason): try receiverDoes([receiver.ended(reason)])
                case .finish: senderFinished = action
                case .none: break
                }
            }
        }

        /// Sends at most `chunks` chunks (all the sender may, if nil).
        mutating func pump(chunks: Int? = nil) throws {
            var sent = 0
            while chunks.map({ sent < $0 }) ?? true, let (offset, count) = sender.nextChunk(maximum: chunkSize) {
                bytesOnWire += count
                sent += 1
                try receiverDoes([try receiver.chunk(offset: offset, count: count)])
            }
        }

        mutating func dropLink() {
            sender.linkDown()
            receiver.linkDown()
        }
    }

    @Test func aNewResourceIsSentWholeInGrantsAndCheckedOnce() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0))
        #expect(pair.sender.state == .sending(next: 0, granted: 2_000), "the first WANT grants a window")
        try pair.pump()
        #expect(pair.senderFinished == .finish(.complete, bySender: false))
        #expect(pair.receiverFinished == .finish(.complete, byReceiver: true, keepPartial: false))
        #expect(pair.bytesOnWire == 10_000, "every byte once")
        #expect(pair.sender.received == 10_000 && pair.receiver.written == 10_000)
    }

    @Test func aSlowWriterHoldsTheSenderToTheWindow() throws {
        var sender = ResourceSendStateMachine(offer: Self.offer)
        var receiver = ResourceReceiveStateMachine(offer: Self.offer, window: 2_500)
        _ = sender.linkUp()
        guard case .sendWant(let received, let granted) = try #require(receiver.prepared(holding: 0).first) else {
            Issue.record("the receiver begins with a WANT")
            return
        }
        _ = try sender.want(received: received, granted: granted)
        var unwritten: [(offset: UInt64, count: UInt64)] = []
        while let chunk = sender.nextChunk(maximum: 1_000) {
            #expect(
                try receiver.chunk(offset: chunk.offset, count: chunk.count)
                    == .write(offset: chunk.offset, count: chunk.count)
            )
            unwritten.append(chunk)
        }
        #expect(unwritten.map(\.count).reduce(0, +) == 2_500, "the sender stops at the window while nothing is written")
        // The first write grants nothing yet (less than half the window written); the second does.
        #expect(receiver.wrote(through: 1_000) == .none)
        #expect(receiver.wrote(through: 2_000) == .sendWant(received: 2_000, granted: 4_500))
    }

    @Test func aBrokenLinkResumesFromWhatTheReceiverWrote() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0))
        try pair.pump(chunks: 3)
        pair.dropLink()
        #expect(pair.receiver.state == .awaitingOffer(written: 3_000))
        #expect(pair.sender.nextChunk(maximum: 1_000) == nil, "nothing is sent without a link")
        try pair.senderDoes([pair.sender.linkUp()])
        #expect(
            pair.sender.state == .sending(next: 3_000, granted: 5_000),
            "resumed where the receiver's writing stood"
        )
        try pair.pump()
        #expect(pair.senderFinished == .finish(.complete, bySender: false))
        #expect(pair.bytesOnWire == 10_000, "nothing written was sent again")
    }

    @Test func aRestartedReceiverResumesFromWhatItKept() throws {
        // The receiver's process ended with 4,000 bytes of the file kept; the new one finds them.
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 4_000))
        try pair.pump()
        #expect(pair.bytesOnWire == 6_000)
        #expect(pair.receiverFinished == .finish(.complete, byReceiver: true, keepPartial: false))
    }

    @Test func aCompleteIdenticalFileIsTakenAtOnce() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 10_000))
        #expect(pair.bytesOnWire == 0)
        #expect(pair.senderFinished == .finish(.complete, bySender: false))
    }

    @Test func aHashThatDoesNotMatchFailsBothSidesAndDropsThePartial() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0), hashMatches: false)
        while let (offset, count) = pair.sender.nextChunk(maximum: 1_000) {
            try pair.receiverDoes([try pair.receiver.chunk(offset: offset, count: count)], hashMatches: false)
        }
        #expect(pair.senderFinished == .finish(.hashMismatch, bySender: false))
        #expect(pair.receiverFinished == .finish(.hashMismatch, byReceiver: true, keepPartial: false))
    }

    @Test func resetsEveryFewChunksStillComplete() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0))
        var links = 1
        while pair.senderFinished == nil {
            try pair.pump(chunks: 2)
            pair.dropLink()
            try pair.senderDoes([pair.sender.linkUp()])
            links += 1
            #expect(links < 20, "the transfer makes progress on every link")
        }
        #expect(pair.bytesOnWire == 10_000, "a chunk written is never sent again, however often the link breaks")
    }

    @Test func eitherSideCancelsAndTheOtherIsToldWhy() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0))
        try pair.pump(chunks: 1)
        try pair.senderDoes(pair.sender.end(.cancelled))
        #expect(pair.senderFinished == .finish(.cancelled, bySender: true))
        #expect(pair.receiverFinished == .finish(.cancelled, byReceiver: false, keepPartial: false))

        var other = Pair()
        _ = other.sender.linkUp()
        try other.receiverDoes(other.receiver.prepared(holding: 0))
        try other.receiverDoes(other.receiver.end(.diskFull))
        #expect(other.senderFinished == .finish(.diskFull, bySender: false))
        #expect(
            other.receiverFinished == .finish(.diskFull, byReceiver: true, keepPartial: true),
            "a disk that filled keeps what was written"
        )
        #expect(other.sender.nextChunk(maximum: 1_000) == nil)
    }

    @Test func theEndOfATransferLostWithItsLinkIsSaidAgain() throws {
        var pair = Pair()
        _ = pair.sender.linkUp()
        try pair.receiverDoes(pair.receiver.prepared(holding: 0))
        while let (offset, count) = pair.sender.nextChunk(maximum: 1_000) {
            let write = try pair.receiver.chunk(offset: offset, count: count)
            guard case .write(let at, let bytes) = write else { continue }
            let next = pair.receiver.wrote(through: at + bytes)
            if next == .verify { break }  // the check runs; the link breaks before its END goes
            try pair.receiverDoes([next])
        }
        #expect(pair.receiver.state == .verifying)
        _ = pair.receiver.verified(true)  // its END is lost with the link
        pair.dropLink()
        try pair.senderDoes([pair.sender.linkUp()])
        #expect(
            pair.senderFinished == .finish(.complete, bySender: false),
            "the re-offer is answered with the END again"
        )
    }

    @Test func wantsAndChunksThatBreakTheRulesAreErrors() throws {
        var sender = ResourceSendStateMachine(offer: Self.offer)
        _ = sender.linkUp()
        #expect(throws: MultipeerError.self) { _ = try sender.want(received: 10_001, granted: 10_001) }
        #expect(throws: MultipeerError.self) { _ = try sender.want(received: 5, granted: 4) }

        var receiver = ResourceReceiveStateMachine(offer: Self.offer, window: 2_000)
        _ = receiver.prepared(holding: 0)
        #expect(throws: MultipeerError.self) { _ = try receiver.chunk(offset: 1, count: 10) }
        #expect(throws: MultipeerError.self) { _ = try receiver.chunk(offset: 0, count: 0) }
        #expect(throws: MultipeerError.self) { _ = try receiver.chunk(offset: 0, count: 2_001) }
        #expect(try receiver.chunk(offset: 0, count: 2_000) == .write(offset: 0, count: 2_000))
    }

    @Test func chunksWrittenAfterTheLinkWentMoveTheResumePoint() throws {
        var receiver = ResourceReceiveStateMachine(offer: Self.offer, window: 4_000)
        _ = receiver.prepared(holding: 0)
        _ = try receiver.chunk(offset: 0, count: 1_000)
        _ = try receiver.chunk(offset: 1_000, count: 1_000)
        receiver.linkDown()
        #expect(try receiver.chunk(offset: 2_000, count: 1_000) == .none, "a chunk of the link gone is not taken")
        #expect(receiver.wrote(through: 1_000) == .none)
        #expect(receiver.wrote(through: 2_000) == .none)
        #expect(
            receiver.offeredAgain() == [.sendWant(received: 2_000, granted: 6_000)],
            "resumed after what was written"
        )
    }

    @Test func anOfferWhoseLinkWentWhileTheReceiverLookedWaitsForTheNextOffer() throws {
        var receiver = ResourceReceiveStateMachine(offer: Self.offer, window: 2_000)
        receiver.linkDown()
        #expect(receiver.prepared(holding: 3_000).isEmpty, "no WANT on a link that is gone")
        #expect(receiver.offeredAgain() == [.sendWant(received: 3_000, granted: 5_000)])
    }
}

@Suite struct ResourceFrameTests {
    static let id = UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")!

    static func frame(_ type: FrameType, _ build: (inout ByteBuffer) -> Void) -> Frame {
        var value = ByteBuffer()
        withUnsafeBytes(of: id.uuid) { _ = value.writeBytes($0) }
        build(&value)
        return Frame(type: type, value: value)
    }

    @Test func namesAReceiverCouldNotUseAsAFileNameAreRefused() {
        for name in ["", ".", "..", "a/b", "tab\there", String(repeating: "x", count: 256)] {
            #expect(throws: MultipeerError.self, "\(name.debugDescription)") {
                _ = try ResourceOffer(id: Self.id, name: name, length: 1, sha256: Array(repeating: 0, count: 32))
            }
        }
        #expect(throws: MultipeerError.self) {
            _ = try ResourceOffer(
                id: Self.id,
                name: "a",
                length: 1,
                sha256: Array(repeating: 0, count: 32),
                metadata: ["k=": "v"]
            )
        }
        #expect(throws: MultipeerError.self) {
            _ = try ResourceOffer(id: Self.id, name: "a", length: 1, sha256: [1, 2])
        }
        #expect(throws: MultipeerError.self) {
            _ = try ResourceOffer(id: Self.id, name: "a", length: .max, sha256: Array(repeating: 0, count: 32))
        }
    }

    @Test func framesThatBreakTheirRulesAreMalformed() {
        let broken: [(String, Frame)] = [
            (
                "an offer named ..",
                Self.frame(.resourceOffer) { value in
                    value.writeInteger(UInt64(1))
                    value.writeBytes(Array(repeating: 0, count: 32))
                    value.writeInteger(UInt8(2))
                    value.writeString("..")
                    value.writeInteger(UInt8(0))
                }
            ),
            (
                "a WANT granting less than it received",
                Self.frame(.resourceWant) { $0.writeMultipleIntegers(UInt64(5), UInt64(4)) }
            ),
            (
                "a WANT with a byte after its fields",
                Self.frame(.resourceWant) { value in
                    value.writeMultipleIntegers(UInt64(0), UInt64(4))
                    value.writeInteger(UInt8(0))
                }
            ),
            ("an empty chunk", Self.frame(.resourceChunk) { $0.writeInteger(UInt64(0)) }),
            ("an END cut short", Self.frame(.resourceEnd) { $0.writeInteger(UInt16(0)) }),
        ]
        for (what, frame) in broken {
            let error = #expect(throws: MultipeerError.self, "\(what)") { _ = try LinkMessage(frame: frame) }
            #expect(error?.code == .malformedMessage, "\(what)")
        }
    }

    @Test func anEndReasonThisVersionDoesNotNameIsKeptAsItsNumber() throws {
        let frame = Self.frame(.resourceEnd) { value in
            value.writeInteger(UInt16(77))
            value.writeInteger(UInt8(0))
        }
        guard case .resourceEnd(let end) = try LinkMessage(frame: frame) else {
            Issue.record("a RESOURCE_END frame decodes as one")
            return
        }
        #expect(end.reason.rawValue == 77 && end.reason.description == "reason 77")
    }
}
