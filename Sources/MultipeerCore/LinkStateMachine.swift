import NIOCore

package import struct Foundation.UUID

/// One link's opening and life, without I/O (docs/PROTOCOL.md, 3): the TLS handshake, then the
/// HELLO exchange with its checks, then frames as ``LinkMessage``s until the link closes. The
/// link's handler feeds it what happened and carries out the ``Action`` it returns.
///
/// The peer's HELLO must come first, prove the ID it claims for this very TLS connection (its
/// signature over the connection's exporter value and the side it speaks from), name another
/// peer than this one, and, when the dialler meant to reach a certain peer, name that peer.
/// Anything else fails the handshake, and the link is closed before anyone sees it. One timer
/// covers the whole handshake; a failure once the link is open closes it, with a best-effort
/// GOODBYE when the peer broke the protocol.
package struct LinkStateMachine: Sendable {
    package enum State: Sendable {
        case awaitingTLS
        /// TLS is up; this side's HELLO is sent, bound to the connection's exporter value.
        case awaitingHello(exporter: [UInt8])
        /// The peer's HELLO arrived and proved it.
        case open(Hello)
        case closed
    }

    package enum Action: Sendable {
        /// Sign this side's HELLO for the connection's exporter value and send it.
        case sendHello(exporter: [UInt8])
        /// The peer proved its HELLO: stop the handshake's timer and tell the rest of the link.
        case helloCompleted(Hello)
        /// The handshake failed: stop its timer, fail whoever waits for the HELLO, and close.
        case failHandshake(any Error)
        /// Hand the peer's message on.
        case deliver(LinkMessage)
        /// The open link failed: pass the error on and close, after a GOODBYE (protocol error)
        /// saying `goodbye`, if there is one (the peer broke the protocol).
        case failLink(any Error, goodbye: String?)
        case none
    }

    package private(set) var state = State.awaitingTLS
    private let localPeerID: UUID
    /// The side this end of the connection is on; the peer's HELLO comes from the other.
    private let side: Hello.Side
    /// Whom the dialler meant to reach, when discovery said: the HELLO must prove that peer.
    private let expectedPeer: UUID?
    /// Names the peer in errors (its address, once known).
    package var peer = "the peer"

    package init(localPeerID: UUID, side: Hello.Side, expectedPeer: UUID? = nil) {
        self.localPeerID = localPeerID
        self.side = side
        self.expectedPeer = expectedPeer
    }

    /// Whether the handshake (TLS, then HELLO) is under way.
    package var isHandshaking: Bool {
        switch state {
        case .awaitingTLS, .awaitingHello: true
        case .open, .closed: false
        }
    }

    /// TLS finished; `exporter` is the connection's exporter value for HELLO.
    package mutating func tlsCompleted(exporter: [UInt8]) -> Action {
        guard case .awaitingTLS = state else { return .none }
        state = .awaitingHello(exporter: exporter)
        return .sendHello(exporter: exporter)
    }

    /// A frame arrived.
    package mutating func received(_ frame: Frame) -> Action {
        switch state {
        case .awaitingTLS, .closed:
            return .none
        case .awaitingHello(let exporter):
            do {
                let hello = try verifiedHello(frame, exporter: exporter)
                state = .open(hello)
                return .helloCompleted(hello)
            } catch {
                return failHandshake(error)
            }
        case .open:
            do {
                return .deliver(try LinkMessage(frame: frame))
            } catch {
                return failed(error)
            }
        }
    }

    /// The peer's HELLO, checked: first, proving its ID for this connection, not this peer,
    /// and the one the dialler meant.
    private func verifiedHello(_ frame: Frame, exporter: [UInt8]) throws -> Hello {
        guard frame.type == .hello else {
            throw MultipeerError(.helloExpected, "\(peer) sent \(frame.type) before its HELLO")
        }
        guard case .hello(let hello) = try LinkMessage(frame: frame) else {
            preconditionFailure("a HELLO frame decodes as a HELLO")
        }
        try hello.verify(
            value: frame.value,
            exporter: exporter,
            side: side == .dialler ? .listener : .dialler,
            peer: peer
        )
        guard hello.peerID != localPeerID else {
            throw MultipeerError(
                .selfConnection,
                "\(peer) is this very peer (\(hello.peerID)): the link reached itself and was closed"
            )
        }
        if let expectedPeer, hello.peerID != expectedPeer {
            throw MultipeerError(
                .unexpectedPeer,
                "\(peer), advertised as peer \(expectedPeer), proved to be peer \(hello.peerID) (\(hello.displayName)): the advert is stale or false, and the link is closed"
            )
        }
        return hello
    }

    /// Something below failed (TLS, the frame decoder), or a frame did not decode.
    package mutating func failed(_ error: any Error) -> Action {
        switch state {
        case .awaitingTLS, .awaitingHello:
            return failHandshake(error)
        case .open:
            state = .closed
            guard let failure = error as? MultipeerError,
                [.frameTooLarge, .malformedMessage, .truncatedFrame].contains(failure.code)
            else {
                return .failLink(error, goodbye: nil)
            }
            return .failLink(failure, goodbye: failure.message)
        case .closed:
            return .none
        }
    }

    /// The handshake's time ran out.
    package mutating func handshakeTimedOut(after timeout: Duration) -> Action {
        let stage: String
        switch state {
        case .awaitingTLS: stage = "the TLS handshake"
        case .awaitingHello: stage = "the HELLO exchange"
        case .open, .closed: return .none
        }
        return failHandshake(MultipeerError(.handshakeTimeout, "\(peer) did not complete \(stage) within \(timeout)"))
    }

    /// The connection closed.
    package mutating func closed() -> Action {
        defer { state = .closed }
        guard isHandshaking else { return .none }
        return failHandshake(MultipeerError(.closedDuringHandshake, "\(peer) closed the connection before its HELLO"))
    }

    private mutating func failHandshake(_ error: any Error) -> Action {
        guard isHandshaking else { return .none }
        state = .closed
        return .failHandshake(error)
    }
}
