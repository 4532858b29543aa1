import Foundation
import MultipeerCore
import NIOCore
import Testing

/// A message's trace context on the wire (docs/PROTOCOL.md 2c): what fits is sent, what a
/// receiver refuses, and how a message in fragments keeps it.
@Suite struct TraceContextTests {
    static let context = TraceContext(fitting: [
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ])!

    /// The frame `type` with `value`, decoded.
    static func decode(_ type: FrameType, _ value: [UInt8]) throws -> LinkMessage {
        try LinkMessage(frame: Frame(type: type, value: ByteBuffer(bytes: value)))
    }

    @Test func onlyEntriesWithinTheLimitsAreSentAndAtMostSixteen() throws {
        #expect(TraceContext(fitting: [:]) == nil, "nothing to send: plain DATA")
        #expect(TraceContext(fitting: ["": "x", "k": String(repeating: "v", count: 256)]) == nil)
        let many = Dictionary(uniqueKeysWithValues: (0..<40).map { (String(format: "key%02d", $0), "value") })
        let kept = try #require(TraceContext(fitting: many))
        #expect(kept.entries.count == TraceContext.maximumEntries)
        #expect(kept.entries.keys.sorted() == (0..<16).map { String(format: "key%02d", $0) }, "the first in byte order")
        let long = try #require(
            TraceContext(fitting: ["traceparent": "00-1", "tracestate": String(repeating: "a=b,", count: 100)])
        )
        #expect(long.entries == ["traceparent": "00-1"], "a tracestate too long for a String8 is left out")
    }

    @Test func aContextWithNoEntryTooManyOrKeysOutOfOrderIsMalformed() throws {
        let message: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1, 1, 0x4e]  // sequence 1, type "N", no payload
        func entry(_ key: String, _ value: String) -> [UInt8] {
            [UInt8(key.utf8.count)] + Array(key.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
        }
        let malformed: [(String, [UInt8])] = [
            ("no entry", [0] + message),
            ("17 entries", [17] + (0..<17).flatMap { entry(String(format: "k%02d", $0), "v") } + message),
            ("keys out of order", [2] + entry("b", "1") + entry("a", "2") + message),
            ("an empty key", [1] + entry("", "v") + message),
            ("cut short", [2] + entry("a", "1")),
        ]
        for (what, value) in malformed {
            let error = #expect(throws: MultipeerError.self, "\(what)") { try Self.decode(.dataTraced, value) }
            #expect(error?.code == .malformedMessage, "\(what)")
            #expect(error?.message.contains("DATA_TRACED") == true, "\(what): \(error?.message ?? "")")
        }
        let decoded = try Self.decode(.dataTraced, [1] + entry("a", "1") + message)
        guard case .data(let data) = decoded else {
            Issue.record("not DATA: \(decoded)")
            return
        }
        #expect(data.context?.entries == ["a": "1"] && data.sequence == 1 && data.typeName == "N")
    }

    /// To a peer that does not take contexts the same message goes as DATA and FRAGMENT.
    @Test func withoutTheContextAMessageIsPlainDataOrFragment() throws {
        let data = LinkMessage.data(
            try DataMessage(sequence: 3, typeName: "Note", payload: ByteBuffer(string: "{}"), context: Self.context)
        )
        #expect(data.frameType == .dataTraced)
        #expect(data.withoutTraceContext.frameType == .data)
        #expect(
            data.withoutTraceContext
                == .data(try DataMessage(sequence: 3, typeName: "Note", payload: ByteBuffer(string: "{}")))
        )
        let ack = LinkMessage.ack(3)
        #expect(ack.withoutTraceContext == ack)
    }

    /// Every fragment carries the context, within the peer's frame limit; the message put
    /// together has the context of the fragment that completed it.
    @Test func aMessageInFragmentsCarriesItsContextInEachAndKeepsItWhenPutTogether() throws {
        let payload = ByteBuffer(bytes: [UInt8](repeating: 7, count: 40_000))
        let message = try DataMessage(sequence: 5, typeName: "Chart", payload: payload, context: Self.context)
        let frameLimit = 16_384
        var fragments: [Fragment] = []
        var offset = 0
        while offset < payload.readableBytes {
            let fragment = message.fragment(from: offset, frameLimit: frameLimit)
            #expect(fragment.context == Self.context)
            #expect(fragment.frameLength <= frameLimit)
            var frame = ByteBuffer()
            LinkMessage.fragment(fragment).writeFrame(to: &frame)
            #expect(frame.readableBytes - Frame.headerLength == fragment.frameLength, "its length as written")
            fragments.append(fragment)
            offset += fragment.bytes.readableBytes
        }
        #expect(fragments.count == 3)
        guard case .partial(var assembly) = try MessageAssembly.begin(with: fragments[0], limit: 1 << 20, from: "peer")
        else {
            Issue.record("one fragment made the message")
            return
        }
        // (As a resumed message: its first fragments came on a link that took no context.)
        var withoutContext = fragments[1]
        withoutContext.context = nil
        #expect(try assembly.append(withoutContext, from: "peer") == nil)
        let whole = try #require(try assembly.append(fragments[2], from: "peer"))
        #expect(whole.context == Self.context)
        #expect(whole.payload == payload)
    }
}

/// A peer of a release before trace contexts (and before fragments) gets the message as DATA:
/// its frame limit is checked against the message without its context.
@Suite struct TraceContextLimitTests {
    @Test func aMessageThatFitsAnEarlierPeersFrameWithoutItsContextIsNotRefused() throws {
        let limits = BufferLimits(maximumCount: 8, maximumBytes: 1 << 20)
        var delivery = PeerDeliveryStateMachine(
            peerID: UUID(),
            policy: .init(limits: limits, unreliableLimits: limits, failWhenFull: false, sendTimeout: .seconds(30))
        )
        let context = try #require(TraceContext(fitting: ["tracestate": String(repeating: "s", count: 200)]))
        let payload = ByteBuffer(bytes: [UInt8](repeating: 1, count: 16_000))
        let message = try DataMessage(sequence: 0, typeName: "Chart", payload: payload, context: context)
        let frameLimit = message.plainFrameLength  // exactly: the context would not fit
        #expect(message.frameLength > frameLimit)
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: frameLimit, messageLimit: nil, reads: .every)
        try delivery.checkFits(message, localLimits: (1 << 20, 1 << 20))
        var larger = message
        larger.payload.writeInteger(UInt8(2))
        #expect(throws: MultipeerError.self) { try delivery.checkFits(larger, localLimits: (1 << 20, 1 << 20)) }
    }
}
