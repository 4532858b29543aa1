import Dispatch
import NIOCore

/// A host's event loop in a simulated world: its tasks are the host's jobs on the world's
/// thread (``SimulationScheduler``), its clock the host's time (``HostTime``). The host's links
/// run on it, and so do its sessions' Swift tasks (through a task executor on it).
final class SimulatedEventLoop: EventLoop, @unchecked Sendable, CustomStringConvertible {
    let scheduler: SimulationScheduler
    let host: SimulationScheduler.HostID
    let time: HostTime
    let description: String

    init(scheduler: SimulationScheduler, host: SimulationScheduler.HostID, time: HostTime, name: String) {
        self.scheduler = scheduler
        self.host = host
        self.time = time
        self.description = "SimulatedEventLoop(\(name))"
    }

    var inEventLoop: Bool { scheduler.isRunning(host) }

    var now: NIODeadline { .uptimeNanoseconds(UInt64(max(0, time.host(atWorld: scheduler.now)))) }

    func execute(_ task: @escaping @Sendable () -> Void) {
        scheduler.enqueue(host, task)
    }

    @discardableResult
    func scheduleTask<T>(deadline: NIODeadline, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        let promise = makePromise(of: T.self)
        let timer = scheduler.schedule(host, at: time.world(atHost: Int64(clamping: deadline.uptimeNanoseconds))) {
            // A job of this host: on its loop.
            do {
                promise.assumeIsolated().succeed(try task())
            } catch {
                promise.fail(error)
            }
        }
        return Scheduled(promise: promise, cancellationTask: { [scheduler] in scheduler.cancel(timer) })
    }

    @discardableResult
    func scheduleTask<T>(in delay: TimeAmount, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        scheduleTask(deadline: now + delay, task)
    }

    func preconditionInEventLoop(file: StaticString, line: UInt) {
        precondition(inEventLoop, "not in \(description)", file: file, line: line)
    }

    func preconditionNotInEventLoop(file: StaticString, line: UInt) {
        precondition(!inEventLoop, "in \(description)", file: file, line: line)
    }

    func shutdownGracefully(queue: DispatchQueue, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
        queue.async { callback(nil) }
    }
}
