import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// The session keeps this link as its peer's one link (sent down the pipeline by the session):
/// the link adopts the peer's receive window and says where the peer resumes.
struct LinkAdopted {}

/// The session moved its peer's delivery onto this link, link `link`, and applied the peer's
/// resume point to it (sent down the pipeline by the session): the link's later ACKs go to the
/// delivery from here, on the event loop, not through the session.
struct DeliveryAttached: Sendable {
    var delivery: PeerDelivery
    var link: LinkID
}

/// Fired inbound by ``LinkHandler`` when the peer's HELLO has arrived and been accepted.
struct HelloCompleted {
    var remote: Hello
}
