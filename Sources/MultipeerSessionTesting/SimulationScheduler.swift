import Foundation
import NIOConcurrencyHelpers

/// Runs everything of a simulated world on one thread, in simulated time.
///
/// Work comes as jobs, each for a host (its event loop's tasks, its sessions' Swift jobs) or
/// for the world (what the simulated kernels and network do). Jobs run one at a time, in the
/// order they became ready; timers become ready at their deadline. Time moves only while a
/// ``run(until:within:)`` is under way, and only when nothing is ready: then it jumps to the
/// earliest timer. A frozen host's jobs wait, in order, until it thaws; the world's go on (its
/// kernel still acknowledges what arrives, as under SIGSTOP).
///
/// `@unchecked Sendable`: every field is under `condition`'s lock, except ``currentHost``,
/// which only the scheduler's thread writes and reads.
final class SimulationScheduler: @unchecked Sendable {
    /// A host of the world: its jobs stop while it is frozen.
    struct HostID: Hashable, Sendable, CustomStringConvertible {
        let rawValue: Int
        var description: String { "host \(rawValue)" }
    }

    private struct Job {
        var host: HostID?
        var work: () -> Void
    }

    private struct Timer: Comparable {
        var deadline: Int64
        /// Breaks ties in the order timers were set.
        var number: UInt64
        var host: HostID?
        var work: () -> Void

        static func < (lhs: Timer, rhs: Timer) -> Bool { (lhs.deadline, lhs.number) < (rhs.deadline, rhs.number) }
        static func == (lhs: Timer, rhs: Timer) -> Bool { lhs.number == rhs.number }
    }

    /// A run under way: time moves until `condition` holds at a quiet moment or `limit` comes.
    private struct Run {
        var limit: Int64
        var condition: @Sendable () -> Bool
        var finished: @Sendable (Bool) -> Void
    }

    private let condition = NSCondition()
    private var ready: [Job] = []
    private var readyHead = 0
    private var timers = TimerHeap()
    private var cancelled: Set<UInt64> = []
    private var timerCount: UInt64 = 0
    private var frozen: Set<HostID> = []
    /// Killed: their jobs wait, parked, until the world is shut down (``release(_:)``).
    private var killed: Set<HostID> = []
    private var parked: [HostID: [Job]] = [:]
    private var run: Run?
    private var stopping = false
    /// Simulated nanoseconds since the world began.
    private var nanoseconds: Int64 = 0
    private var thread: pthread_t?
    /// The host whose job runs now (on the scheduler's thread only).
    private var running: HostID?

    init() {
        let started = NIOLockedValueBox(false)
        let thread = Thread { [self] in
            self.condition.lock()
            self.thread = pthread_self()
            self.condition.unlock()
            started.withLockedValue { $0 = true }
            self.loop()
        }
        thread.name = "simulated world"
        thread.stackSize = 8 << 20
        thread.start()
        while !started.withLockedValue({ $0 }) { usleep(100) }
    }

    /// Simulated time, in nanoseconds since the world began.
    var now: Int64 {
        condition.lock()
        defer { condition.unlock() }
        return nanoseconds
    }

    /// Whether the caller is a job of `host`, on the scheduler's thread.
    func isRunning(_ host: HostID?) -> Bool {
        guard let thread, pthread_equal(thread, pthread_self()) != 0 else { return false }
        return running == host
    }

    /// Whether the caller is on the scheduler's thread.
    var isSchedulerThread: Bool {
        guard let thread else { return false }
        return pthread_equal(thread, pthread_self()) != 0
    }

    /// Runs `work` as a job of `host` (nil: of the world), after the jobs ready now.
    func enqueue(_ host: HostID?, _ work: @escaping () -> Void) {
        condition.lock()
        ready.append(Job(host: host, work: work))
        condition.signal()
        condition.unlock()
    }

    /// Runs `work` as a job of `host` at `deadline` (simulated nanoseconds); returns what cancels it.
    func schedule(_ host: HostID?, at deadline: Int64, _ work: @escaping () -> Void) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        timerCount += 1
        timers.insert(Timer(deadline: max(deadline, nanoseconds), number: timerCount, host: host, work: work))
        condition.signal()
        return timerCount
    }

    func cancel(_ timer: UInt64) {
        condition.lock()
        cancelled.insert(timer)
        condition.unlock()
    }

    func freeze(_ host: HostID) {
        condition.lock()
        frozen.insert(host)
        condition.unlock()
    }

    /// Thaws `host`: what it missed runs first, in order, then the rest.
    func thaw(_ host: HostID) {
        unpark(host) { $0.frozen.remove(host) }
    }

    /// Kills `host`: its jobs, ready, parked or to come, never run in the world's life. (They
    /// are kept, not dropped: a task whose job is dropped never ends, and what it holds is never
    /// freed; ``release(_:)`` lets them run down at the end.)
    func kill(_ host: HostID) {
        condition.lock()
        killed.insert(host)
        frozen.remove(host)
        condition.unlock()
    }

    /// Lets a killed host's jobs run again, once its sessions are cancelled and its sockets
    /// closed: they run down, and free what they hold.
    func release(_ host: HostID) {
        unpark(host) { $0.killed.remove(host) }
    }

    /// Lifts what kept `host`'s jobs parked (`change`, under the lock): they run next, in the
    /// order they came, then the rest.
    private func unpark(_ host: HostID, _ change: (SimulationScheduler) -> Void) {
        condition.lock()
        change(self)
        if let jobs = parked.removeValue(forKey: host) {
            ready.replaceSubrange(readyHead..<readyHead, with: jobs)
        }
        condition.signal()
        condition.unlock()
    }

    func isFrozen(_ host: HostID) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return frozen.contains(host)
    }

    /// Lets time run until `condition` holds when nothing is ready, or until `duration` of
    /// simulated time has passed. Returns whether the condition held.
    func run(until condition: @escaping @Sendable () -> Bool, within duration: Int64) async -> Bool {
        await withCheckedContinuation { continuation in
            self.condition.lock()
            precondition(run == nil, "one run at a time")
            run = Run(
                limit: nanoseconds + duration,
                condition: condition,
                finished: { continuation.resume(returning: $0) }
            )
            self.condition.signal()
            self.condition.unlock()
        }
    }

    /// Stops the thread once what is ready has run.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
    }

    private func loop() {
        condition.lock()
        while true {
            if let job = nextJob() {
                running = job.host
                condition.unlock()
                job.work()
                condition.lock()
                running = nil
                continue
            }
            if stopping {
                condition.unlock()
                return
            }
            // Quiet: nothing can run now.
            guard let current = run else {
                condition.wait()
                continue
            }
            condition.unlock()
            let held = current.condition()
            condition.lock()
            if held {
                finishRun(true)
                continue
            }
            guard let earliest = nextTimerDeadline(), earliest <= current.limit else {
                nanoseconds = max(nanoseconds, current.limit)
                finishRun(false)
                continue
            }
            nanoseconds = max(nanoseconds, earliest)
            while let timer = timers.first, timer.deadline <= nanoseconds {
                timers.removeFirst()
                if cancelled.remove(timer.number) != nil { continue }
                ready.append(Job(host: timer.host, work: timer.work))
            }
        }
    }

    private func finishRun(_ held: Bool) {
        let finished = run!.finished
        run = nil
        condition.unlock()
        finished(held)
        condition.lock()
    }

    private func nextTimerDeadline() -> Int64? {
        while let timer = timers.first, cancelled.contains(timer.number) {
            timers.removeFirst()
            cancelled.remove(timer.number)
        }
        return timers.first?.deadline
    }

    /// The next job that may run; a frozen host's are parked on the way.
    private func nextJob() -> Job? {
        while readyHead < ready.count {
            let job = ready[readyHead]
            readyHead += 1
            if readyHead > 1_024, readyHead * 2 > ready.count {
                ready.removeFirst(readyHead)
                readyHead = 0
            }
            if let host = job.host {
                if frozen.contains(host) || killed.contains(host) {
                    parked[host, default: []].append(job)
                    continue
                }
            }
            return job
        }
        if readyHead > 0 {
            ready.removeAll(keepingCapacity: true)
            readyHead = 0
        }
        return nil
    }

    /// A binary min-heap of timers.
    private struct TimerHeap {
        private var items: [Timer] = []

        var first: Timer? { items.first }

        mutating func insert(_ timer: Timer) {
            items.append(timer)
            var child = items.count - 1
            while child > 0 {
                let parent = (child - 1) / 2
                guard items[child] < items[parent] else { break }
                items.swapAt(child, parent)
                child = parent
            }
        }

        mutating func removeFirst() {
            items.swapAt(0, items.count - 1)
            items.removeLast()
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < items.count, items[left] < items[smallest] { smallest = left }
                if right < items.count, items[right] < items[smallest] { smallest = right }
                if smallest == parent { return }
                items.swapAt(parent, smallest)
                parent = smallest
            }
        }
    }
}
