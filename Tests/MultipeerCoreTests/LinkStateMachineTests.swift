import Foundation
import MultipeerCore
import NIOCore
import Testing

/// A link's opening, driven by its events alone: the HELLO's checks and the handshake's failures.
@Suite struct LinkStateMachineTests {
    static let exporter = [UInt8](repeating: 0x5A, count: Hello.exporterLength)
    static let local = TestSigner()

    /// A HELLO frame from `signer`, speaking from `side`, for `exporter`.
    static func helloFrame(
        from signer: TestSigner = TestSigner(),
        side: Hello.Side = .listener,
        exporter: [UInt8] = exporter
    ) throws -> Frame {
        let hello = try Hello(peerID: signer.key.peerID, key: signer.key, incarnation: 1, displayName: "peer")
            .signed(exporter: exporter, side: side, sign: signer.sign)
        var value = ByteBuffer()
        hello.encode(into: &value)
        return Frame(type: .hello, value: value)
    }

    /// A dialler's link with TLS up: its HELLO sent.
    static func dialler(expecting peer: UUID? = nil) -> LinkStateMachine {
        var link = LinkStateMachine(localPeerID: local.key.peerID, side: .dialler, expectedPeer: peer)
        guard case .sendHello(let exporter) = link.tlsCompleted(exporter: Self.exporter) else {
            Issue.record("TLS up: this side's HELLO goes")
            return link
        }
        #expect(exporter == Self.exporter)
        return link
    }

    static func failure(_ action: LinkStateMachine.Action) -> MultipeerError.Code? {
        if case .failHandshake(let error) = action { (error as? MultipeerError)?.code } else { nil }
    }

    @Test func aHelloThatProvesThePeerOpensTheLinkAndFramesFollowAsMessages() throws {
        let peer = TestSigner()
        var link = Self.dialler(expecting: peer.key.peerID)
        guard case .helloCompleted(let hello) = link.received(try Self.helloFrame(from: peer)) else {
            Issue.record("open")
            return
        }
        #expect(hello.peerID == peer.key.peerID)
        #expect(!link.isHandshaking)
        var ack = ByteBuffer()
        LinkMessage.ack(7, partial: nil).writeFrame(to: &ack)
        guard
            case .deliver(.ack(7, nil)) = link.received(
                Frame(type: .ack, value: ack.getSlice(at: 8, length: ack.readableBytes - 8)!)
            )
        else {
            Issue.record("an ACK, handed on")
            return
        }
    }

    @Test func aFrameBeforeTheHelloFailsTheHandshake() {
        var link = Self.dialler()
        #expect(Self.failure(link.received(Frame(type: .data, value: ByteBuffer()))) == .helloExpected)
        #expect(link.received(Frame(type: .data, value: ByteBuffer())).isNone, "closed: nothing more")
    }

    @Test func aHelloForAnotherConnectionOrSideOrFromThisPeerOrAnotherThanMeantFails() throws {
        var replayed = Self.dialler()
        #expect(
            Self.failure(
                replayed.received(try Self.helloFrame(exporter: [UInt8](repeating: 1, count: Hello.exporterLength)))
            ) == .badSignature,
            "signed for another TLS connection"
        )
        var reflected = Self.dialler()
        #expect(
            Self.failure(reflected.received(try Self.helloFrame(side: .dialler))) == .badSignature,
            "this side's own words sent back"
        )
        var itself = Self.dialler()
        #expect(Self.failure(itself.received(try Self.helloFrame(from: Self.local))) == .selfConnection)
        var other = Self.dialler(expecting: UUID())
        #expect(Self.failure(other.received(try Self.helloFrame())) == .unexpectedPeer)
    }

    @Test func theHandshakeTimesOutNamingItsStageAndAClosedConnectionFailsIt() {
        var waitingForTLS = LinkStateMachine(localPeerID: Self.local.key.peerID, side: .listener)
        guard case .failHandshake(let error as MultipeerError) = waitingForTLS.handshakeTimedOut(after: .seconds(5))
        else {
            Issue.record("timed out")
            return
        }
        #expect(error.code == .handshakeTimeout)
        #expect(error.message.contains("the TLS handshake"))
        var waitingForHello = Self.dialler()
        guard case .failHandshake(let late as MultipeerError) = waitingForHello.handshakeTimedOut(after: .seconds(5))
        else {
            Issue.record("timed out")
            return
        }
        #expect(late.message.contains("the HELLO exchange"))
        var closed = Self.dialler()
        #expect(Self.failure(closed.closed()) == .closedDuringHandshake)
    }

    @Test func anOpenLinkThatFailsSaysGoodbyeOnlyWhenThePeerBrokeTheProtocol() throws {
        var link = Self.dialler()
        _ = link.received(try Self.helloFrame())
        guard case .failLink(_, let goodbye) = link.failed(MultipeerError(.frameTooLarge, "a frame of 2 MiB")) else {
            Issue.record("failed")
            return
        }
        #expect(goodbye == "a frame of 2 MiB")
        #expect(link.failed(MultipeerError(.frameTooLarge, "again")).isNone, "closed once")
        var reset = Self.dialler()
        _ = reset.received(try Self.helloFrame())
        guard case .failLink(_, nil) = reset.failed(MultipeerError(.connectionFailed, "reset")) else {
            Issue.record("no GOODBYE for a reset")
            return
        }
        #expect(reset.closed().isNone, "a link that was open closes without a handshake failure")
    }
}

extension LinkStateMachine.Action {
    var isNone: Bool { if case .none = self { true } else { false } }
}
