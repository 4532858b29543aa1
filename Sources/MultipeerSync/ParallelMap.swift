import Dispatch
import Foundation

/// The cores this process may run on, read once: on Linux each read opens and parses the
/// cgroup's files (6 % of a simulated hour of eight stores, read at every batch checked).
private let cores = ProcessInfo.processInfo.activeProcessorCount

extension Array where Element: Sendable {
    /// `transform` of each element, in order, computed on every core: for work that is pure and
    /// costs tens of microseconds an element (signing and checking signatures), a batch takes
    /// about its time divided by the cores. Small arrays are mapped on the caller's thread.
    func parallelMap<Result: Sendable>(_ transform: @escaping @Sendable (Element) -> Result) -> [Result] {
        guard count >= 64, cores > 1 else { return map(transform) }
        let (elements, count) = (self, count)
        let chunks = Swift.min(count, cores * 4)
        return [Result](unsafeUninitializedCapacity: count) { buffer, initialized in
            // (Each index is written by one iteration alone, and read after every one ended.)
            nonisolated(unsafe) let base = buffer.baseAddress!
            DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
                for index in chunk * count / chunks..<(chunk + 1) * count / chunks {
                    (base + index).initialize(to: transform(elements[index]))
                }
            }
            initialized = count
        }
    }
}
