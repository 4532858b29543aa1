import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// What a session's link tells its session, on an EmbeddedChannel: held until the session takes
/// the link in, then in order, and the link's end once, with the GOODBYE or the error.
@Suite struct LinkReporterTests {
    /// A reporter on a connected channel, and what it reported.
    struct Link {
        let channel = EmbeddedChannel()
        let reports: LinkReports
        let events = NIOLockedValueBox<[LinkReporter.Event]>([])

        init() throws {
            let reporter = LinkReporter()
            try channel.pipeline.syncOperations.addHandler(reporter)
            reports = LinkReports(reporter, eventLoop: channel.eventLoop)
            try channel.connect(to: SocketAddress(ipAddress: "198.18.0.2", port: 7000)).wait()
        }

        /// Ends the channel, whatever state it is in (its pipeline and handlers hold each other until then).
        func finish() { _ = try? channel.finish(acceptAlreadyClosed: true) }

        func takeIn() {
            let events = self.events
            reports.report { event in events.withLockedValue { $0.append(event) } }
            channel.embeddedEventLoop.run()
        }

        /// The events so far, in words.
        var said: [String] {
            events.withLockedValue { events in
                events.map { event in
                    switch event {
                    case .resumePoint(let sequence, _): "resume \(sequence)"
                    case .rejected(let rejection): "rejected \(rejection.sequence)"
                    case .reads(let types): "reads \(types)"
                    case .closed(let goodbye, let error):
                        "closed \(goodbye.map { "\($0)" } ?? "-") \(error.map { "\($0)" } ?? "-")"
                    }
                }
            }
        }
    }

    struct Broken: Error, CustomStringConvertible {
        var description: String { "broken" }
    }

    @Test func whatComesBeforeTheSessionTakesTheLinkInIsHeldAndThenReportedInOrder() throws {
        let link = try Link()
        defer { link.finish() }
        link.channel.pipeline.fireUserInboundEventTriggered(ResumePointReceived(sequence: 4, partial: nil))
        try link.channel.writeInbound(LinkMessage.reject(Rejection(sequence: 5, typeName: "Note", reason: "no")))
        #expect(link.said.isEmpty)
        link.takeIn()
        #expect(link.said == ["resume 4", "rejected 5"])
        try link.channel.writeInbound(LinkMessage.reject(Rejection(sequence: 6, typeName: "Note", reason: "no")))
        #expect(link.said == ["resume 4", "rejected 5", "rejected 6"])
        _ = try link.channel.finish(acceptAlreadyClosed: true)
        #expect(link.said.last == "closed - -")
    }

    @Test func aGoodbyeClosesTheLinkAndItsEndSaysWhy() throws {
        let link = try Link()
        defer { link.finish() }
        link.takeIn()
        try link.channel.writeInbound(LinkMessage.goodbye(.notInRoster, "not in roster"))
        #expect(!link.channel.isActive)
        #expect(link.said == ["closed notInRoster -"])
    }

    @Test func anErrorClosesTheLinkAndItsEndCarriesIt() throws {
        let link = try Link()
        defer { link.finish() }
        link.channel.pipeline.fireErrorCaught(Broken())
        #expect(!link.channel.isActive)
        #expect(link.said.isEmpty)  // (held: not taken in yet)
        link.takeIn()
        #expect(link.said == ["closed - broken"])
        // Nothing follows the end.
        link.channel.pipeline.fireChannelInactive()
        #expect(link.said.count == 1)
    }
}
