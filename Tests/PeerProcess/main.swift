// A MultipeerSession in a process of its own, for tests that freeze, kill and restart a peer:
//
//   multipeer-test-peer --psk-file FILE --identity-file FILE --name NAME [--port N] [--static HOST:PORT ...]
//       [--resource-dir DIR]
//
// Static peers only (no DNS-SD); keepalive 500 ms / 1.5 s stretched by MULTIPEER_TEST_TIME_SCALE
// (TestTime). Prints one line per session event; with a resource directory, receives files into
// it and prints `resource-progress BYTES` as each arrives and `resource-complete PATH` or
// `resource-failed ERROR` when it ends. Runs until killed; SIGINT or SIGTERM stop it gracefully
// (GOODBYE on every link), and it exits 0.
import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport

var options: [String: [String]] = [:]
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let key = arguments.next(), let value = arguments.next() {
    // (Not `options[key, default: []].append(value)`: in top-level async code that leaked the
    // default's closure context, which LeakSanitizer reports once the process exits by itself.)
    options[key] = (options[key] ?? []) + [value]
}
guard let keyFile = options["--psk-file"]?.first, let identityFile = options["--identity-file"]?.first else {
    FileHandle.standardError.write(
        Data(
            "usage: multipeer-test-peer --psk-file FILE --identity-file FILE --name NAME [--port N] [--static HOST:PORT ...]\n"
                .utf8
        )
    )
    exit(2)
}
var configuration = MultipeerSession.Configuration(
    serviceType: "_navlog._tcp",
    peer: PeerInfo(displayName: options["--name"]?.first ?? "child"),
    psk: try PreSharedKey(contentsOfFile: keyFile),
    port: Int(options["--port"]?.first ?? "0") ?? 0,
    discovery: .staticPeers(options["--static"] ?? []),
    keepalive: KeepaliveParameters(
        interval: TestTime.scaled(.milliseconds(500)),
        timeout: TestTime.scaled(.milliseconds(1500))
    )
)
configuration.resourceDirectory = options["--resource-dir"]?.first.map { URL(fileURLWithPath: $0) }
let session = MultipeerSession(
    configuration: configuration,
    identity: try PeerIdentity(loadingOrCreatingFile: identityFile)
)

let events = session.events
try await withThrowingDiscardingTaskGroup { group in
    group.addTask { try await session.runUntilSignalled() }
    if configuration.resourceDirectory != nil {
        group.addTask {
            for await resource in session.incomingResources {
                for await progress in resource.progress {
                    FileHandle.standardOutput.write(Data("resource-progress \(progress.bytesDone)\n".utf8))
                }
                do {
                    let file = try await resource.file()
                    FileHandle.standardOutput.write(Data("resource-complete \(file.path)\n".utf8))
                } catch {
                    FileHandle.standardOutput.write(Data("resource-failed \(error)\n".utf8))
                }
            }
        }
    }
    for await event in events {
        FileHandle.standardOutput.write(Data("\(event)\n".utf8))
    }
}
