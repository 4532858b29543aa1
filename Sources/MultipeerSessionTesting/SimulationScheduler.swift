import Foundation
import MultipeerCore
import NIOConcurrencyHelpers

/// Runs everything of a simulated world on one thread, in simulated time.
///
/// Work comes as jobs, each in a lane: a host's (its event loop's tasks, its sessions' Swift
/// jobs), the world's kernel (what the simulated kernels and network do), or the world's tasks
/// (the code that drives the world, ``SimulatedWorld/executor``). A lane runs its jobs one at a
/// time in the order they came, as an event loop does; which lane runs next, among those with
/// a job ready, is the ``SimulationOrder``'s: the oldest job's, or one drawn from the seed, as
/// threads running side by side would take them. Timers become ready at their deadline. Time
/// moves only while a ``run(until:within:)`` is under way, and only when nothing is ready: then
/// it jumps to the earliest timer. A frozen host's lane waits until it thaws; the world's go on
/// (its kernel still acknowledges what arrives, as under SIGSTOP).
///
/// `@unchecked Sendable`: every field is under `condition`'s lock, except `running`,
/// which only the scheduler's thread writes and reads.
final class SimulationScheduler: @unchecked Sendable {
    /// A host of the world: its jobs stop while it is frozen.
    struct HostID: Hashable, Sendable, CustomStringConvertible {
        let rawValue: Int
        var description: String { "host \(rawValue)" }
    }

    private struct Job {
        /// Its place in the order jobs came (a first-in-first-out order runs the least first).
        var number: UInt64
        var host: HostID?
        var work: () -> Void
    }

    /// Jobs that run one at a time, in the order they came.
    private struct Lane {
        var jobs: [Job] = []
        var head = 0
        /// Frozen or killed: its jobs wait.
        var stopped = false
        /// In ``SimulationScheduler/eligible``.
        var eligible = false

        var first: Job? { head < jobs.count ? jobs[head] : nil }
        var isEmpty: Bool { head == jobs.count }

        mutating func removeFirst() -> Job {
            let job = jobs[head]
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 1_024, head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }
    }

    /// The world kernel's lane and the world tasks' lane; a host's is its number plus one.
    private static let kernelLane = 0
    private static let worldTaskLane = 1

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
    private var lanes: [Lane] = [Lane(), Lane()]
    /// The lanes with a job ready that may run, in the order they became so.
    private var eligible: [Int] = []
    private var jobCount: UInt64 = 0
    /// Draws the next lane (``SimulationOrder/drawn``); nil: the oldest job's lane runs next.
    private var draw: SplitMix64?
    private var timers = TimerHeap()
    private var cancelled: Set<UInt64> = []
    private var timerCount: UInt64 = 0
    private var frozen: Set<HostID> = []
    /// Killed: their jobs wait until the world is shut down (``release(_:)``).
    private var killed: Set<HostID> = []
    private var run: Run?
    private var stopping = false
    /// Simulated nanoseconds since the world began.
    private var nanoseconds: Int64 = 0
    private var thread: pthread_t?
    /// The host whose job runs now (on the scheduler's thread only).
    private var running: HostID?

    /// `draw`: the seed of the order of lanes ready at once (nil: the oldest job first).
    init(draw seed: UInt64?) {
        draw = seed.map { SplitMix64(seed: $0) }
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

    /// Runs `work` as a job of `host` (nil: of the world's kernel), after the jobs of its lane
    /// ready now.
    func enqueue(_ host: HostID?, _ work: @escaping () -> Void) {
        condition.lock()
        append(Job(number: 0, host: host, work: work), to: Self.lane(of: host))
        condition.signal()
        condition.unlock()
    }

    /// Runs `work` as a job of the world's tasks (the code that drives it), after theirs ready now.
    func enqueueWorldTask(_ work: @escaping () -> Void) {
        condition.lock()
        append(Job(number: 0, host: nil, work: work), to: Self.worldTaskLane)
        condition.signal()
        condition.unlock()
    }

    private static func lane(of host: HostID?) -> Int {
        host.map { $0.rawValue + 1 } ?? kernelLane
    }

    /// Under the lock.
    private func append(_ job: Job, to lane: Int) {
        var job = job
        jobCount += 1
        job.number = jobCount
        while lanes.count <= lane { lanes.append(Lane()) }
        lanes[lane].jobs.append(job)
        makeEligible(lane)
    }

    /// Under the lock: puts `lane` among those that may run next, if it has a job and may.
    private func makeEligible(_ lane: Int) {
        guard !lanes[lane].eligible, !lanes[lane].stopped, !lanes[lane].isEmpty else { return }
        lanes[lane].eligible = true
        eligible.append(lane)
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
        stop(host)
        condition.unlock()
    }

    /// Thaws `host`: what it missed runs, late, in the order it came.
    func thaw(_ host: HostID) {
        condition.lock()
        frozen.remove(host)
        resume(host)
        condition.unlock()
    }

    /// Kills `host`: its jobs, ready or to come, never run in the world's life. (They are
    /// kept, not dropped: a task whose job is dropped never ends, and what it holds is never
    /// freed; ``release(_:)`` lets them run down at the end.)
    func kill(_ host: HostID) {
        condition.lock()
        killed.insert(host)
        frozen.remove(host)
        stop(host)
        condition.unlock()
    }

    /// Lets a killed host's jobs run again, once its sessions are cancelled and its sockets
    /// closed: they run down, and free what they hold.
    func release(_ host: HostID) {
        condition.lock()
        killed.remove(host)
        resume(host)
        condition.unlock()
    }

    /// Under the lock: `host`'s lane runs nothing until ``resume(_:)``.
    private func stop(_ host: HostID) {
        let lane = Self.lane(of: host)
        while lanes.count <= lane { lanes.append(Lane()) }
        lanes[lane].stopped = true
        if lanes[lane].eligible, let index = eligible.firstIndex(of: lane) {
            eligible.remove(at: index)
            lanes[lane].eligible = false
        }
    }

    /// Under the lock: `host`'s lane runs again, unless it is still frozen or killed.
    private func resume(_ host: HostID) {
        let lane = Self.lane(of: host)
        guard lane < lanes.count, !frozen.contains(host), !killed.contains(host) else { return }
        lanes[lane].stopped = false
        makeEligible(lane)
        condition.signal()
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
                append(Job(number: 0, host: timer.host, work: timer.work), to: Self.lane(of: timer.host))
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

    /// The next job that may run: the first of a lane drawn among those that may run, or of
    /// the lane whose first job came first.
    private func nextJob() -> Job? {
        guard !eligible.isEmpty else { return nil }
        var chosen = 0
        if var random = draw {
            chosen = Int(random.next() % UInt64(eligible.count))
            draw = random
        } else {
            for index in eligible.indices.dropFirst()
            where lanes[eligible[index]].first!.number < lanes[eligible[chosen]].first!.number {
                chosen = index
            }
        }
        let lane = eligible[chosen]
        let job = lanes[lane].removeFirst()
        if lanes[lane].isEmpty {
            lanes[lane].eligible = false
            eligible.remove(at: chosen)
        }
        return job
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
