import Foundation
import Glibc
import MultipeerTestSupport

/// Faults made in the network between two namespace hosts (Benchmarks/detection-hosts.sh):
/// host B drops every packet in and out (iptables), which no proxy can imitate, since a proxy's
/// own kernel keeps answering. Our session is compared with plain TCP connections that rely on
/// the kernel alone.
struct NetworkHosts {
    /// Host B's namespace name, for `ip netns exec`.
    var peerNamespace: String
    var localAddress: String
    var peerAddress: String

    /// Makes host B a black hole, or heals it.
    func blackHole(_ on: Bool) {
        for chain in ["INPUT", "OUTPUT"] {
            run("/usr/sbin/ip", ["netns", "exec", peerNamespace, "iptables", on ? "-I" : "-D", chain, "-j", "DROP"])
        }
    }

    /// Runs `arguments` in host B in the background.
    func start(_ arguments: [String]) throws -> BackgroundProcess {
        try BackgroundProcess("/usr/sbin/ip", ["netns", "exec", peerNamespace] + arguments)
    }

    private func run(_ path: String, _ arguments: [String]) {
        _ = try? BackgroundProcess(path, arguments).waitUntilExit()
    }
}

/// A plain TCP connection to host B's sink (no TLS, no application ping), tuned one of two ways.
enum KernelDetection: String, CaseIterable {
    /// SO_KEEPALIVE, idle 2 s, then probes every second, three of them.
    case keepalive = "TCP keepalive (idle 2 s, 1 s x 3)"
    /// TCP_USER_TIMEOUT 1.5 s, with a byte written every 500 ms as an application would.
    case userTimeout = "TCP_USER_TIMEOUT 1.5 s (+ writes)"

    /// Connects, applies `fault` (true: break, false: heal), and returns how long the kernel
    /// took to report the connection dead, or nil if it did not within `limit`.
    func measure(_ hosts: NetworkHosts, port: UInt16, limit: Duration, fault: (Bool) -> Void) -> Duration? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var one: Int32 = 1
        switch self {
        case .keepalive:
            var idle: Int32 = 2
            var interval: Int32 = 1
            var count: Int32 = 3
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, 4)
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, &idle, 4)
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, &interval, 4)
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, &count, 4)
        case .userTimeout:
            var timeout: UInt32 = 1500
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_USER_TIMEOUT, &timeout, 4)
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, hosts.peerAddress, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { return nil }
        usleep(200_000)  // let the connection settle before the fault
        let clock = ContinuousClock()
        fault(true)
        defer { fault(false) }
        let start = clock.now
        var pollDescriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var byte: UInt8 = 1
        while clock.now - start < limit {
            if self == .userTimeout, send(fd, &byte, 1, Int32(MSG_NOSIGNAL)) < 0 { return clock.now - start }
            // A dead connection shows as readable with an error (or EOF).
            if poll(&pollDescriptor, 1, 500) > 0 {
                var buffer = [UInt8](repeating: 0, count: 64)
                if recv(fd, &buffer, buffer.count, 0) <= 0 { return clock.now - start }
            }
        }
        return nil
    }
}

/// A TCP sink for the kernel baselines, run in host B with python3: accepts any number of
/// connections and reads them until they end.
let tcpSinkScript = """
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
    def drain(c):
        try:
            while c.recv(65536): pass
        except OSError: pass
        c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()
    """
