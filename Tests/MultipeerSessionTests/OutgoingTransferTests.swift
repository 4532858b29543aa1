import Foundation
import MultipeerCore
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// A file being sent, on a channel standing for its link.
@Suite struct OutgoingTransferTests {
    /// A file is read 256 KiB at a time but goes in RESOURCE_CHUNK frames of at most a stream's
    /// 64 KiB, in order and whole: what the link's writer sends between two of them (a message)
    /// waits behind 64 KiB of the file, not 256.
    @Test func aChunkReadGoesInFramesOfAStreamsSizeInOrder() async throws {
        let length = 600 << 10
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("outgoing-\(UUID()).bin")
        try Data(bytes).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let queue = DispatchFileQueue(label: "test")
        let source = try await SourceFile.open(url, on: queue)
        let offer = try ResourceOffer(id: UUID(), name: "chart.pdf", length: source.length, sha256: source.sha256)
        let transfer = OutgoingTransfer(
            offer: offer,
            number: 1,
            peerID: UUID(),
            source: source,
            queue: queue,
            clock: SystemClock()
        ) {}
        let channel = NIOAsyncTestingChannel()
        let receiver = try Hello(identity: PeerIdentity(), incarnation: 1, displayName: "receiver")
        transfer.linkUp(LinkHandle(id: LinkID(1), channel: channel, hello: receiver))
        #expect(try await channel.waitForOutboundWrite(as: LinkMessage.self) == .resourceOffer(offer))

        try transfer.want(ResourceWant(id: offer.id, received: 0, granted: offer.length))
        var chunks: [ResourceChunk] = []
        var sent = 0
        while sent < length {
            guard case .resourceChunk(let chunk) = try await channel.waitForOutboundWrite(as: LinkMessage.self) else {
                Issue.record("only chunks after the grant")
                break
            }
            chunks.append(chunk)
            sent += chunk.bytes.readableBytes
        }
        #expect(chunks.allSatisfy { $0.bytes.readableBytes <= Resources.frameLength }, "no frame above 64 KiB")
        #expect(chunks.count == 10, "nine of 64 KiB and the last 24 KiB")
        #expect(chunks.map(\.offset) == chunks.indices.map { UInt64($0 * Resources.frameLength) }, "in order")
        #expect(chunks.flatMap { Array($0.bytes.readableBytesView) } == bytes, "the file, whole")
        transfer.stop()
        _ = try await channel.finish(acceptAlreadyClosed: true)
    }

    /// Runs its work at once, on the caller's thread: what a transfer reads is read by the time
    /// the call that asked for it returns.
    struct InlineQueue: FileQueue {
        func async(_ work: @escaping @Sendable () -> Void) { work() }
        func assertOnQueue() {}
    }

    /// The peer's link is told to go only by the link that went (``PeerLinkFeature``): one that
    /// went after its successor came leaves the transfer reading for the successor.
    @Test func aLinkThatWentAfterItsSuccessorCameLeavesTheTransferOnTheSuccessor() async throws {
        let length = 10_000
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("outgoing-\(UUID()).bin")
        try Data(repeating: 7, count: length).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let source = try await SourceFile.open(url, on: InlineQueue())
        let offer = try ResourceOffer(id: UUID(), name: "log.txt", length: source.length, sha256: source.sha256)
        let transfer = OutgoingTransfer(
            offer: offer,
            number: 1,
            peerID: UUID(),
            source: source,
            queue: InlineQueue(),
            clock: SystemClock()
        ) {}
        let receiver = try Hello(identity: PeerIdentity(), incarnation: 1, displayName: "receiver")
        let (first, second) = (NIOAsyncTestingChannel(), NIOAsyncTestingChannel())
        transfer.linkUp(LinkHandle(id: LinkID(1), channel: first, hello: receiver))
        transfer.linkUp(LinkHandle(id: LinkID(2), channel: second, hello: receiver))
        #expect(try await second.waitForOutboundWrite(as: LinkMessage.self) == .resourceOffer(offer))
        transfer.linkDown(LinkID(1))
        try transfer.want(ResourceWant(id: offer.id, received: 0, granted: offer.length))
        #expect(transfer.sent.bytes == UInt64(length), "read for the link it is on")
        #expect(transfer.sent.offers == 2)
        transfer.stop()
        _ = try await first.finish(acceptAlreadyClosed: true)
        _ = try await second.finish(acceptAlreadyClosed: true)
    }
}
