import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// Where a session's links hand what they receive.
struct Inbox: Sendable {
    /// What was delivered from each sender, for reliable delivery.
    var windows: ReceiveWindows
    /// The application's streams.
    var subscriptions: Subscriptions
    var metrics: SessionMetrics
    /// The largest message this side takes (Limits.maximumMessageLength).
    var maximumMessageLength = MultipeerSession.Limits().maximumMessageLength
}
