import MultipeerSession
import NIOCore

/// A process's ``LinkTransport`` in a simulated world: connections over the
/// ``SimulatedNetwork`` from its machine, channels on its event loop.
struct SimulatedTransport: LinkTransport {
    let machine: SimulatedMachine
    let loop: SimulatedEventLoop
    let network: SimulatedNetwork

    func connect<Link: Sendable>(
        host: String,
        port: Int,
        on eventLoop: any EventLoop,
        timeout: Duration,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Link
    ) async throws -> Link {
        let (network, machine, loop) = (network, machine, loop)
        return try await loop.flatSubmit {
            let socket = SimulatedSocket(
                network: network,
                machine: machine,
                local: machine.address,
                localPort: machine.ephemeralPort()
            )
            socket.userTimeout = options.userTimeout?.nanoseconds
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
        host: String?,
        port: Int,
        on eventLoop: any EventLoop,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Accepted
    ) async throws -> any ListeningSocket<Accepted> {
        let (network, machine, loop) = (network, machine, loop)
        let listening = Listening<Accepted>(network: network, loop: loop)
        let bound = try await loop.submit {
            let listener = SimulatedListener { socket in
                socket.userTimeout = options.userTimeout?.nanoseconds
                // The kernel accepted it; the process takes it when it runs.
                loop.execute { listening.take(socket, initialize) }
            }
            listening.listener = listener
            return (try network.listen(listener, on: machine, port: port), machine.address)
        }.get()
        listening.localAddress = try SocketAddress(ipAddress: bound.1, port: bound.0)
        return listening
    }

    /// A listening port. Touched on its process's loop, but for its address, set once before use.
    private final class Listening<Accepted: Sendable>: ListeningSocket, @unchecked Sendable {
        let network: SimulatedNetwork
        let loop: SimulatedEventLoop
        let (accepted, continuation) = AsyncThrowingStream<Accepted, any Error>.makeStream()
        var localAddress = try! SocketAddress(ipAddress: "0.0.0.0", port: 0)
        var listener: SimulatedListener?

        init(network: SimulatedNetwork, loop: SimulatedEventLoop) {
            self.network = network
            self.loop = loop
        }

        func take(_ socket: SimulatedSocket, _ initialize: (any Channel) throws -> Accepted) {
            guard listener != nil else { return socket.close() }
            let channel = SimulatedChannel(loop: loop, socket: socket, remote: socket.remote!)
            do {
                let link = try initialize(channel)
                channel.accepted()
                continuation.yield(link)
            } catch {
                channel.close(promise: nil)
            }
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
                guard let listener = self.listener else { return }
                self.listener = nil
                self.network.stopListening(listener)
                self.continuation.finish()
            }.get()
        }
    }
}
