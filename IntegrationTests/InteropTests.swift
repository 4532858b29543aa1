import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import NIOCore
import Testing

@testable import MultipeerSession

/// Our listener against TLS clients nobody here wrote: GnuTLS's own gnutls-cli.
@Suite(.serialized) struct InteropTests {
    static let gnutlsCLI = "/usr/bin/gnutls-cli"

    static func gnutlsCLI(
        port: Int,
        key: String?,
        identity: String = LinkFixtures.identity,
        priority: String = TLSConfiguration.priorities,
        debug: Bool = false
    ) async throws -> ProcessResult {
        let psk = key.map { ["--pskusername", identity, "--pskkey", $0] } ?? ["--insecure"]
        return try await runProcess(
            gnutlsCLI,
            ["--verbose", "-p", "\(port)", "127.0.0.1"] + psk + ["--priority", priority] + (debug ? ["-d", "4"] : [])
        )
    }

    /// Runs gnutls-cli against `server` and checks that it was refused (it failed and completed
    /// no handshake); returns what gnutls-cli printed and the failure the listener reported.
    static func refusal(
        at server: TestListener,
        key: String?,
        identity: String = LinkFixtures.identity,
        priority: String = TLSConfiguration.priorities,
        debug: Bool = false
    ) async throws -> (output: String, failure: MultipeerError?) {
        let result = try await gnutlsCLI(
            port: server.port,
            key: key,
            identity: identity,
            priority: priority,
            debug: debug
        )
        #expect(result.status != 0)
        #expect(!result.output.contains("Handshake was completed"), "\(result.output)")
        return (result.output, try await withDeadline(.seconds(20)) { await server.nextFailure() })
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func gnutlsCLICompletesATLS13ECDHEPSKHandshake() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            let result = try await Self.gnutlsCLI(port: server.port, key: LinkFixtures.keyHex)
            #expect(result.output.contains("Handshake was completed"), "\(result.output)")
            // gnutls-cli's own report: TLS 1.3, PSK authentication with an ephemeral X25519 exchange.
            for line in [
                "- Version: TLS1.3", "- PSK authentication.", "- Ephemeral EC Diffie-Hellman parameters",
                "- Using curve: X25519", "- Cipher: AES-128-GCM",
            ] {
                #expect(result.output.contains(line), "\(line) in \(result.output)")
            }
            // TLS succeeded; gnutls-cli then left without a HELLO, which is what our side reports.
            let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
            #expect(failure?.code == .closedDuringHandshake, "\(String(describing: failure))")
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func gnutlsCLIWithAWrongKeyIsRefusedWhileAGoodLinkKeepsWorking() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            let good = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: server.port,
                configuration: LinkFixtures.configuration(name: "good")
            )
            try await good.channel.executeThenClose { inbound, outbound in
                var replies = inbound.makeAsyncIterator()
                func roundTrip(_ text: String) async throws -> String? {
                    try await outbound.write(
                        .data(DataMessage(sequence: 0, typeName: "Text", payload: ByteBuffer(string: text)))
                    )
                    while let message = try await replies.next() {
                        if case .data(let data) = message { return String(buffer: data.payload) }
                    }
                    return nil
                }
                #expect(try await roundTrip("before") == "before")

                let wrongKey = String(LinkFixtures.keyHex.reversed())
                let (output, failure) = try await Self.refusal(at: server, key: wrongKey)
                #expect(output.contains("Illegal parameter"), "\(output)")
                #expect(failure?.code == .authenticationFailed)
                #expect(failure?.message.hasPrefix("peer at 127.0.0.1:") == true)
                #expect(
                    failure?.message.hasSuffix("failed PSK authentication: keys differ") == true,
                    "\(String(describing: failure))"
                )
                #expect(failure?.description.contains(wrongKey) == false)
                #expect(failure?.description.contains(LinkFixtures.keyHex) == false)

                #expect(try await roundTrip("after") == "after")
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aTLS12ClientIsRefused() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            let (_, failure) = try await Self.refusal(
                at: server,
                key: LinkFixtures.keyHex,
                priority: "NORMAL:-VERS-ALL:+VERS-TLS1.2:+PSK:+ECDHE-PSK"
            )
            #expect(failure?.code == .tlsNegotiationFailed, "\(String(describing: failure))")
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aTLS13ClientWithoutAPreSharedKeyIsRefused() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            // Certificates only, as a web client would: the listener has no certificate to offer.
            let (_, failure) = try await Self.refusal(at: server, key: nil, priority: "NORMAL:-VERS-ALL:+VERS-TLS1.3")
            #expect(failure?.code == .tlsNegotiationFailed, "\(String(describing: failure))")
        }
    }

    /// A ClientHello offering PSK without ECDHE (`psk_ke` alone) gets a ServerHello that takes
    /// none of its keys, then alert 40, handshake_failure (docs/PROTOCOL.md, 1.2).
    @Test(.scaledTimeLimit(minutes: 1))
    func aClientOfferingPSKWithoutECDHEGetsHandshakeFailure() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            let (output, failure) = try await Self.refusal(
                at: server,
                key: LinkFixtures.keyHex,
                priority: "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+PSK",
                debug: true
            )
            #expect(output.contains("Received alert [40]"), "\(output)")
            // After a ServerHello that takes none of the client's keys: a key share, no PSK.
            #expect(output.contains("SERVER HELLO") && output.contains("Parsing extension 'Key Share/51'"), "\(output)")
            #expect(!output.contains("Parsing extension 'Pre Shared Key"), "\(output)")
            #expect(failure?.code == .tlsNegotiationFailed, "\(String(describing: failure))")
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func anUnknownIdentityIsRefusedAsAnAuthenticationFailure() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            let (_, failure) = try await Self.refusal(at: server, key: LinkFixtures.keyHex, identity: "stranger")
            #expect(failure?.code == .authenticationFailed, "\(String(describing: failure))")
            #expect(
                failure?.message.hasSuffix(
                    "failed PSK authentication: it offered the identity \"stranger\", which none of this session's group keys has (Configuration.keys)"
                ) == true,
                "\(String(describing: failure))"
            )
            #expect(failure?.description.contains(LinkFixtures.keyHex) == false)
            try await BadPeerTests.expectStillServing(server)
        }
    }
}
