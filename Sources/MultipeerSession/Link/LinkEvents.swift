import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// The session keeps this link, link `link`, as its peer's one link (sent down the pipeline by
/// the session): the link adopts the peer's receive window and says where the peer resumes.
struct LinkAdopted {
    var link: LinkID
}

/// The session moved its peer's delivery onto this link, link `link`, and applied the peer's
/// resume point to it (sent down the pipeline by the session): the link's later ACKs go to the
/// delivery from here, on the event loop, not through the session.
struct DeliveryBound: Sendable {
    var delivery: PeerDelivery
    var link: LinkID
}

/// The application may have what this link brings (sent down the pipeline by the session once
/// it has told of the peer's joining): until then the link holds the peer's messages, unread.
struct MessagesAdmitted {}

/// Fired inbound by ``DeliveryHandler`` at the peer's first ACK: where the peer's receive window
/// resumes, which admits the link (``LinkReporter`` takes it to the session).
struct ResumePointReceived {
    var sequence: UInt64
    var partial: PartialMessage?
}

/// Fired inbound by ``LinkHandler`` when the peer's HELLO has arrived and been accepted.
struct HelloCompleted {
    var remote: Hello
}
