import Foundation
import Glibc
import MultipeerSession
import Testing

/// Strangers without the key, as an application sees them: connections that say nothing are
/// closed at the first-bytes deadline, one source holds at most its share of handshakes, a
/// member still joins, and a flood is reported in counted events, not one per connection.
@Suite struct AdmissionTests {
    /// A TCP connection to 127.0.0.1:`port` that never sends a byte; closed on deinit.
    final class Silent: Sendable {
        let descriptor: Int32

        init(port: Int) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw TimedOut(what: "a connection to port \(port): \(String(cString: strerror(errno)))") }
        }

        deinit { close(descriptor) }
    }

    @Test func silentStrangersAreCutOffAndCountedWhileAMemberJoins() async throws {
        var limits = MultipeerSession.Limits(maximumHandshakesPerSource: 2, firstBytesTimeout: .milliseconds(200 * timeScale))
        limits.handshakeTimeout = .seconds(30)
        let server = MultipeerSession(configuration: configuration("server", limits: limits))
        let events = server.events
        try await whileRunning([server]) {
            let port = try await listeningPort(of: server)
            // Forty silent connections, all from 127.0.0.1: each is cut off, by the next one
            // from its source (at most two at once) or at the first-bytes deadline.
            let strangers = try (0..<40).map { _ in try Silent(port: port) }
            let failures = try await within(30, "every stranger's failure reported or counted") {
                var oneByOne: [MultipeerError] = [], counted = 0
                for await event in events {
                    switch event {
                    case .connectionFailed(_, let error): oneByOne.append(error)
                    case .connectionsFailed(let count, _): counted += count
                    default: break
                    }
                    if oneByOne.count + counted >= strangers.count { return (oneByOne, counted) }
                }
                throw TimedOut(what: "the failures (the session stopped)")
            }
            #expect(Set(failures.0.map(\.code)).isSubset(of: [.connectionLimit, .handshakeTimeout]), "\(failures.0)")
            #expect(failures.0.contains { $0.message.contains("Limits.maximumHandshakesPerSource") })
            #expect(failures.0.count <= 20, "reported one by one ten at a time per code, the rest counted: \(failures.0.count)")
            #expect(failures.1 > 0)
            // A member dials meanwhile and joins.
            let member = MultipeerSession(configuration: configuration("member", dialling: port))
            try await whileRunning([member]) {
                try await waitUntilActive(server, member.peerID)
            }
            _ = strangers
        }
    }
}
