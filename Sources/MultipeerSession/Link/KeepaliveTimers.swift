import MultipeerTLS
import NIOCore

/// The keepalive wake-ups of every link on one event loop, on a single NIO timer.
///
/// An idle mesh is mostly timers: one per link end, re-armed after every wake-up. NIO keeps
/// scheduled tasks in one heap per event loop, and with a thousand link ends in a process
/// inserting into and popping from that heap (each move copying a task) was the largest single
/// cost of an idle mesh. Here wake-ups are rounded up to a grid of ``slotNanoseconds`` and grouped
/// by slot: NIO holds one timer, for the earliest slot, and the links due in a slot wake in one
/// event-loop turn. Arming is an append; a link whose wake-up moved or whose channel closed is
/// skipped when its old slot comes up (``KeepaliveHandler`` knows which slot it armed last).
///
/// Confined to its event loop as everything loop-bound in the package is, by SwiftNIO's
/// loop-bound types: it is reached only through ``on(_:)`` (a `NIOLoopBound` per loop, which
/// checks the loop), and, not `Sendable`, cannot leave the handlers of that loop.
final class KeepaliveTimers {
    /// 20 ms: inside the keepalive's own tolerances (a timeout fires at most 20 ms late; the
    /// default timeout is 1.5 s), and short enough that pings leaving together do not queue
    /// behind each other long enough to lengthen the round trips they measure (the idle
    /// mesh's figures for 5, 20 and 50 ms are in Benchmarks/README.md, MeshBenchmark).
    static let slotNanoseconds: Int64 = 20_000_000

    private let eventLoop: any EventLoop
    /// Handlers waiting, by slot (deadline / ``slotNanoseconds``, rounded up).
    private var waiting: [Int64: [KeepaliveHandler]] = [:]
    /// The slots in `waiting`, latest first, so the earliest is popped from the end.
    private var slots: [Int64] = []
    /// The NIO timer, for the earliest slot.
    private var armed: (slot: Int64, task: Scheduled<Void>)?
    /// Emptied lists of a slot's handlers, kept for their storage: on a busy loop a slot's list
    /// grows to tens of handlers one append at a time, and each new list grew afresh.
    private var spareLists: [[KeepaliveHandler]] = []

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    private static let loops = PerEventLoop { KeepaliveTimers(eventLoop: $0) }

    /// The timers of `eventLoop` (made on first use).
    static func on(_ eventLoop: any EventLoop) -> KeepaliveTimers {
        loops.on(eventLoop)
    }

    /// Wakes `handler` (``KeepaliveHandler/timerFired(slot:)``) at or just after `deadline`
    /// (uptime nanoseconds). Returns the slot, which the handler keeps to recognise its latest arming.
    func arm(_ handler: KeepaliveHandler, atUptimeNanoseconds deadline: Int64) -> Int64 {
        let slot = (deadline + Self.slotNanoseconds - 1) / Self.slotNanoseconds
        if waiting[slot] == nil {
            // Binary search for the insertion point in the descending array.
            var low = 0
            var high = slots.count
            while low < high {
                let middle = (low + high) / 2
                if slots[middle] > slot { low = middle + 1 } else { high = middle }
            }
            slots.insert(slot, at: low)
            waiting[slot] = spareLists.popLast() ?? []
        }
        waiting[slot, default: []].append(handler)
        armEarliest()
        return slot
    }

    private func armEarliest() {
        guard let earliest = slots.last else { return }
        if let armed {
            if armed.slot <= earliest { return }
            armed.task.cancel()
        }
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        let task = eventLoop.scheduleTask(deadline: .uptimeNanoseconds(UInt64(earliest * Self.slotNanoseconds))) {
            loopBound.value.fire()
        }
        armed = (earliest, task)
    }

    private func fire() {
        armed = nil
        let now = Int64(eventLoop.now.uptimeNanoseconds)
        while let slot = slots.last, slot * Self.slotNanoseconds <= now {
            slots.removeLast()
            // Handlers woken here may arm again, in a later slot: take this one out first.
            var handlers = waiting.removeValue(forKey: slot) ?? []
            for handler in handlers { handler.timerFired(slot: slot) }
            handlers.removeAll(keepingCapacity: true)
            if spareLists.count < 16 { spareLists.append(handlers) }
        }
        armEarliest()
    }
}

@available(*, unavailable)
extension KeepaliveTimers: Sendable {}
