package import NIOCore

/// A task executor that runs jobs on a NIO event loop.
///
/// A task that reads and writes one link can prefer its channel's event loop
/// (`withTaskExecutorPreference`): the bytes and the code handling them then stay on one
/// thread, instead of hopping between the event loop and Swift's global pool for every
/// message, which costs a thread wake-up each way.
///
/// `@unchecked Sendable`: the only state is the event loop, which is itself thread-safe.
package final class EventLoopExecutor: TaskExecutor, @unchecked Sendable {
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
