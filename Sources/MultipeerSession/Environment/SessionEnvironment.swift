import Dispatch
import Glibc
package import Logging
package import MultipeerDiscovery
package import NIOCore
import NIOPosix
import Synchronization

/// What a session touches outside itself: the thread its links run on, the clock, the
/// transport, DNS-SD and where its incarnation comes from. ``system`` is the real world;
/// the MultipeerSessionTesting product makes a simulated one, under the same session.
package struct SessionEnvironment: Sendable {
    /// Makes the DNS-SD directory a session browses and advertises in, when its configuration
    /// asks for DNS-SD: whether to wait for the daemon, and the session's logger.
    package typealias Directory = @Sendable (_ waitForDaemon: Bool, _ logger: Logger) throws -> any ServiceDirectory

    /// The event loop every link of the session runs on.
    package var eventLoop: any EventLoop
    package var clock: any SessionClock
    package var transport: any LinkTransport
    package var directory: Directory
    /// The session's incarnation: greater for each later run of one identity.
    package var incarnation: @Sendable () -> UInt64
    package var random: RandomSource
    /// Where work leaves the links' loop for: a link's writer yielding to let its loop read
    /// (Swift's global pool, ``LinkWriter``), and
    /// the decoding of a large message (NIO's thread pool, ``blockingWork``). A simulated
    /// world keeps both in the host's process, on its one thread.
    package var offload: any TaskExecutor
    package var blockingWork: @Sendable (@escaping @Sendable () -> Void) -> Void
    /// Makes the serial queue a resource transfer reads or writes its file on (a queue of
    /// Dispatch's; a simulated world's keep it in the host's process). The files are real either way.
    package var fileQueue: @Sendable (_ label: String) -> any FileQueue
    /// Called as the application reads its messages or its events (each `next()`, on the
    /// reader's own thread): a simulated world checks that the reader runs in the world, where
    /// it can wait for it. Nil in the real world.
    package var readerCheck: (@Sendable () -> Void)?

    package init(
        eventLoop: any EventLoop,
        clock: any SessionClock,
        transport: any LinkTransport,
        directory: @escaping Directory,
        incarnation: @escaping @Sendable () -> UInt64,
        random: RandomSource,
        offload: any TaskExecutor,
        blockingWork: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void,
        fileQueue: @escaping @Sendable (_ label: String) -> any FileQueue,
        readerCheck: (@Sendable () -> Void)? = nil
    ) {
        self.fileQueue = fileQueue
        self.readerCheck = readerCheck
        self.eventLoop = eventLoop
        self.clock = clock
        self.transport = transport
        self.directory = directory
        self.incarnation = incarnation
        self.random = random
        self.offload = offload
        self.blockingWork = blockingWork
    }

    /// The real world: a loop of NIO's shared group, the continuous clock, TCP, avahi-daemon,
    /// the wall clock, the system's random numbers and threads.
    package static var system: SessionEnvironment {
        SessionEnvironment(
            eventLoop: MultiThreadedEventLoopGroup.singleton.next(),
            clock: SystemClock(),
            transport: SocketTransport(),
            directory: { waitForDaemon, logger in try AvahiDirectory(waitForDaemon: waitForDaemon, logger: logger) },
            incarnation: nextIncarnation,
            random: .system,
            offload: globalConcurrentExecutor,
            blockingWork: threadPool,
            fileQueue: { DispatchFileQueue(label: $0) }
        )
    }

    /// Runs blocking work on NIO's shared thread pool.
    package static let threadPool: @Sendable (@escaping @Sendable () -> Void) -> Void = { work in
        NIOThreadPool.singleton.submit { _ in work() }
    }

    private static let lastIncarnation = Atomic<UInt64>(0)

    /// The wall clock in nanoseconds since 1970, and never twice the same in one process: a
    /// restart of the same identity is newer by this measure (docs/PROTOCOL.md, 3).
    private static func nextIncarnation() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let wallClock = UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
        var last = lastIncarnation.load(ordering: .relaxed)
        while true {
            let next = max(wallClock, last + 1)
            let (exchanged, found) = lastIncarnation.compareExchange(
                expected: last,
                desired: next,
                ordering: .relaxed
            )
            if exchanged { return next }
            last = found
        }
    }
}

/// A serial queue for a file's reads and writes (``SessionEnvironment/fileQueue``).
package protocol FileQueue: Sendable {
    /// Runs `work` after what was queued before.
    func async(_ work: @escaping @Sendable () -> Void)
    /// Stops the process, in a debug build, unless this runs on the queue (``QueueBound``'s
    /// check, as SwiftNIO's loop-bound values check their loop).
    func assertOnQueue()
}

/// A Dispatch queue of its own.
package struct DispatchFileQueue: FileQueue {
    private let queue: DispatchQueue

    package init(label: String) {
        queue = DispatchQueue(label: label)
    }

    package func async(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    package func assertOnQueue() {
        assert(
            {
                dispatchPrecondition(condition: .onQueue(queue))
                return true
            }()
        )
    }
}

/// A value confined to a file queue, as SwiftNIO's `NIOLoopBoundBox` confines one to an event
/// loop: every access checks, in a debug build, that it runs on the queue, and no lock is taken.
final class QueueBound<Value>: @unchecked Sendable {
    // (Unchecked: `stored` is read and written only on `queue`, as every access asserts; it is
    // set off the queue only before the box is shared, by `init`.)
    private let queue: any FileQueue
    private var stored: Value

    init(_ value: Value, on queue: any FileQueue) {
        self.queue = queue
        stored = value
    }

    /// The value: on the queue only.
    var value: Value {
        get {
            queue.assertOnQueue()
            return stored
        }
        set {
            queue.assertOnQueue()
            stored = newValue
        }
    }
}
