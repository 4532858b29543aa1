import MultipeerCore
import NIOCore

/// What the session keeps of an established link to write to it and close it.
struct LinkHandle: Sendable {
    var id: LinkID
    var channel: any Channel
    /// Writes its data frames (``LinkWriter``).
    var writer: LinkWriter
    var quality: LinkQualityBox

    /// Says GOODBYE (best effort) and closes the link once it is written, or given up after
    /// `timeout`.
    func close(_ reason: GoodbyeReason, within timeout: TimeAmount) async {
        await Self.sayGoodbye(reason, on: channel, within: timeout)
        try? await channel.close()
    }

    /// Says GOODBYE and waits until it is written, or for at most `timeout`, after which the
    /// link is closed: a peer that stopped reading (its socket full) cannot hold a link, or a
    /// session's shutdown, open. The GOODBYE goes straight into the pipeline, from any task,
    /// cancelled (a session shutting down) or not.
    static func sayGoodbye(_ reason: GoodbyeReason, on channel: any Channel, within timeout: TimeAmount) async {
        let cutoff = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        try? await channel.writeAndFlush(LinkMessage.goodbye(reason, "\(reason)"))
        cutoff.cancel()
    }
}
