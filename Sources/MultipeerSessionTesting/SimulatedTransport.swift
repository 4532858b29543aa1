import MultipeerSession
import NIOCore

/// A host's ``LinkTransport`` in a simulated world: connections over the ``SimulatedNetwork``,
/// channels on the host's event loop.
struct SimulatedTransport: LinkTransport {
    let network: SimulatedNetwork
    let loop: SimulatedEventLoop

    private var address: String { network.address(of: loop.host)! }

    func connect<Link: Sendable>(
        host: String, port: Int, on eventLoop: any EventLoop, timeout: Duration, options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Link
    ) async throws -> Link {
        let (network, loop, address) = (network, loop, address)
        return try await loop.flatSubmit {
            let socket = SimulatedSocket(network: network, host: loop.host, local: address, localPort: network.ephemeralPort(of: loop.host))
            socket.remote = (host, port)
            let channel = SimulatedChannel(loop: loop, socket: socket, remote: (host, port))
            let link: Link
            do {
                link = try initialize(channel)
            } catch {
                channel.close(promise: nil)
                return loop.makeFailedFuture(error)
            }
            channel.register0(promise: nil)
            let connected = loop.makePromise(of: Void.self)
            channel.connect(to: host, port: port, timeout: TimeAmount(timeout), promise: connected)
            return connected.futureResult.map { link }
        }.get()
    }

    func listen<Accepted: Sendable>(
        host: String?, port: Int, on eventLoop: any EventLoop, options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Accepted
    ) async throws -> any ListeningSocket<Accepted> {
        let (network, loop, address) = (network, loop, address)
        let (accepted, continuation) = AsyncThrowingStream<Accepted, any Error>.makeStream()
        let listening = Listening<Accepted>(network: network, loop: loop, accepted: accepted, continuation: continuation)
        let bound = try await loop.submit {
            let listener = SimulatedListener { socket in
                // The kernel accepted it; the process takes it when it runs.
                loop.execute {
                    guard listening.isOpen else {
                        network.scheduler.enqueue(nil) { socket.close() }
                        return
                    }
                    let channel = SimulatedChannel(loop: loop, socket: socket, remote: socket.remote!)
                    do {
                        let link = try initialize(channel)
                        channel.accepted()
                        continuation.yield(link)
                    } catch {
                        channel.close(promise: nil)
                    }
                }
            }
            return try network.listen(listener, host: loop.host, port: port)
        }.get()
        listening.bound(try SocketAddress(ipAddress: address, port: bound))
        return listening
    }

    /// A listening port; touched on the host's loop but for its address, set once before use.
    private final class Listening<Accepted: Sendable>: ListeningSocket, @unchecked Sendable {
        let network: SimulatedNetwork
        let loop: SimulatedEventLoop
        let accepted: AsyncThrowingStream<Accepted, any Error>
        let continuation: AsyncThrowingStream<Accepted, any Error>.Continuation
        private(set) var localAddress: SocketAddress = try! SocketAddress(ipAddress: "0.0.0.0", port: 0)
        var isOpen = true

        init(
            network: SimulatedNetwork, loop: SimulatedEventLoop, accepted: AsyncThrowingStream<Accepted, any Error>,
            continuation: AsyncThrowingStream<Accepted, any Error>.Continuation
        ) {
            self.network = network
            self.loop = loop
            self.accepted = accepted
            self.continuation = continuation
        }

        func bound(_ address: SocketAddress) {
            localAddress = address
        }

        func run(_ body: (any AsyncSequence<Accepted, any Error>) async throws -> Void) async throws {
            do {
                try await body(accepted)
            } catch {
                await close()
                throw error
            }
            await close()
        }

        func close() async {
            try? await loop.submit {
                guard self.isOpen else { return }
                self.isOpen = false
                self.network.stopListening(host: self.loop.host, port: self.localAddress.port!)
                self.continuation.finish()
            }.get()
        }
    }
}
