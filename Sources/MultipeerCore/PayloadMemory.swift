import NIOConcurrencyHelpers
@_spi(CustomByteBufferAllocator) package import NIOCore
import Synchronization  // Atomic (which ThreadSanitizer sees, unlike its Mutex)

#if canImport(Glibc)
import Glibc
#endif

/// Where message payloads live: a `ByteBufferAllocator` whose large buffers (1 MiB and more)
/// are mappings of their own, asking for transparent huge pages, and kept for the next large
/// buffer when released, instead of handed back to the system.
///
/// A large message's payload is written once by the sender's encoder and once by the
/// receiver's reassembly. With `malloc`, each of those is a fresh `mmap` (glibc maps every
/// allocation above 32 MiB), faulted in and zeroed 4 KiB at a time. A mapping used again costs
/// no fault at all; a new one costs a fault per 2 MiB where the kernel grants huge pages, and
/// far more where the host backs a virtual machine's memory only as it is first touched (a
/// guest that reports its free pages). Benchmarks/README.md (SessionBenchmark, large messages)
/// has what each cost on the benchmarks' machine.
///
/// What is kept is bounded: at most ``spareLimit`` mappings, ``spareBytesLimit`` bytes in all;
/// their pages are marked free to the kernel (`MADV_FREE`), which takes them back under memory
/// pressure, and a spare that served no large buffer, and could have served none, for
/// ``spareLifetime`` is unmapped at the next large allocation or release. Smaller buffers come
/// from `malloc` as usual.
package enum PayloadMemory {
    /// The allocator for payloads: the encoder's output and the receiver's reassembly.
    package static let allocator = ByteBufferAllocator(
        allocate: payloadAllocate,
        reallocate: payloadReallocate,
        deallocate: payloadDeallocate,
        copy: payloadCopy
    )

    /// Buffers of at least this capacity are mappings of their own.
    package static let largeCapacity = 1 << 20
    /// The most spare mappings kept.
    package static let spareLimit = 4
    /// The most bytes of spare mappings kept, in all: address space, four buffers of a 64 MiB
    /// message (NIO rounds a capacity up to a power of two: 128 MiB each, half of it touched).
    package static let spareBytesLimit = 1 << 30
    /// A spare that served no large buffer, and could have served none, within this is unmapped
    /// (at the next large allocation or release).
    package static let spareLifetime = Duration.seconds(5)

    /// The spare mappings and their bytes now (for tests and benchmarks).
    package static var spares: (count: Int, bytes: Int) {
        pool.withLockedValue { ($0.spares.count, $0.spares.reduce(0) { $0 + $1.length }) }
    }

    /// How many mappings were made so far, spares taken again not counted (for benchmarks: a
    /// flow of large messages is warm once it makes no more).
    package static var mappingsMade: Int { mappings.load(ordering: .relaxed) }

    /// Unmaps every spare mapping.
    package static func releaseSpares() {
        for spare in pool.withLockedValue({ $0.removeAll() }) { munmap(spare.base, spare.length) }
    }

    // MARK: The blocks

    /// What precedes every block's bytes: its capacity, and whether it is a mapping of its own.
    fileprivate struct Header {
        /// The bytes after the header.
        var capacity: Int
        /// The mapping's length (header included), or 0 for a block from `malloc`.
        var mappedLength: Int
    }

    /// The header's size, 16 bytes: the block's bytes stay 16-byte aligned, as `malloc`'s are.
    fileprivate static let headerSize = MemoryLayout<Header>.stride

    /// A mapping no buffer uses. (Sendable: the pool owns it alone while it is spare.)
    package struct Spare: @unchecked Sendable {
        package var base: UnsafeMutableRawPointer
        package var length: Int
        /// When it last served a buffer, or could have (``Pool/take(length:now:)``).
        package var used: ContinuousClock.Instant

        package init(base: UnsafeMutableRawPointer, length: Int, used: ContinuousClock.Instant) {
            self.base = base
            self.length = length
            self.used = used
        }
    }

    /// The spare mappings and the rules for which to keep: a value, so that tests drive it with
    /// made-up mappings and instants.
    package struct Pool {
        package private(set) var spares: [Spare] = []

        package init() {}

        /// Takes the smallest spare of at least `length` bytes, and at most twice that (a small
        /// message's buffer, which an application may keep, never holds a large mapping).
        ///
        /// The other spares that could have served it count as used now: a flow of large
        /// messages that needs three buffers most of the time and a fourth now and then keeps
        /// the fourth, instead of unmapping it after ``PayloadMemory/spareLifetime`` and faulting
        /// a new one in at the next peak, on the receiving link's event loop, where a small
        /// message beside it waits for the fault.
        package mutating func take(length: Int, now: ContinuousClock.Instant) -> Spare? {
            let fits = { (spare: Spare) in spare.length >= length && spare.length <= 2 * length }
            var best: Int?
            for (index, spare) in spares.enumerated() where fits(spare) {
                spares[index].used = now
                if best.map({ spare.length < spares[$0].length }) ?? true { best = index }
            }
            return best.map { spares.remove(at: $0) }
        }

        /// Keeps `spare`, released now; returns the spares to unmap: those unused for longer
        /// than their lifetime, then the longest kept while over ``PayloadMemory/spareLimit``
        /// or ``PayloadMemory/spareBytesLimit``.
        package mutating func keep(_ spare: Spare) -> [Spare] {
            var unmap = expired(now: spare.used)
            spares.append(spare)
            while spares.count > PayloadMemory.spareLimit
                || spares.reduce(0, { $0 + $1.length }) > PayloadMemory.spareBytesLimit
            {
                unmap.append(spares.removeFirst())
            }
            return unmap
        }

        /// Spares unused for longer than their lifetime, removed.
        package mutating func expired(now: ContinuousClock.Instant) -> [Spare] {
            let old = spares.filter { now - $0.used > PayloadMemory.spareLifetime }
            if !old.isEmpty { spares.removeAll { now - $0.used > PayloadMemory.spareLifetime } }
            return old
        }

        /// Takes every spare.
        package mutating func removeAll() -> [Spare] {
            defer { spares.removeAll() }
            return spares
        }
    }

    fileprivate static let pool = NIOLockedValueBox(Pool())
    private static let mappings = Atomic(0)

    fileprivate static func header(of bytes: UnsafeMutableRawPointer) -> UnsafeMutablePointer<Header> {
        (bytes - headerSize).assumingMemoryBound(to: Header.self)
    }

    /// A block of at least `capacity` bytes.
    fileprivate static func allocate(capacity: Int) -> UnsafeMutableRawPointer {
        guard capacity >= largeCapacity else {
            let base = malloc(headerSize + capacity)!
            base.initializeMemory(as: Header.self, repeating: Header(capacity: capacity, mappedLength: 0), count: 1)
            return base + headerSize
        }
        let now = ContinuousClock.now
        let wanted = roundUp(headerSize + capacity, to: hugePageSize)
        let (spare, expired) = pool.withLockedValue { pool in
            (pool.take(length: wanted, now: now), pool.expired(now: now))
        }
        for old in expired { munmap(old.base, old.length) }
        let base: UnsafeMutableRawPointer
        let length: Int
        if let spare {
            (base, length) = (spare.base, spare.length)
        } else {
            guard let mapped = mmap(nil, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                mapped != MAP_FAILED
            else { fatalError("PayloadMemory: mmap of \(wanted) bytes failed: \(String(cString: strerror(errno)))") }
            _ = madvise(mapped, wanted, MADV_HUGEPAGE)  // a hint: without it, 4 KiB pages
            mappings.add(1, ordering: .relaxed)
            (base, length) = (mapped, wanted)
        }
        base.initializeMemory(
            as: Header.self,
            repeating: Header(capacity: length - headerSize, mappedLength: length),
            count: 1
        )
        return base + headerSize
    }

    fileprivate static func deallocate(_ bytes: UnsafeMutableRawPointer) {
        let header = header(of: bytes).pointee
        let base = bytes - headerSize
        guard header.mappedLength > 0 else { return free(base) }
        // Lazily freed: the pages stay mapped for the next large buffer unless the kernel needs them.
        _ = madvise(base, header.mappedLength, MADV_FREE)
        let spare = Spare(base: base, length: header.mappedLength, used: ContinuousClock.now)
        for old in pool.withLockedValue({ $0.keep(spare) }) { munmap(old.base, old.length) }
    }

    fileprivate static func reallocate(
        _ bytes: UnsafeMutableRawPointer?,
        oldCapacity: Int,
        newCapacity: Int
    ) -> UnsafeMutableRawPointer {
        guard let bytes else { return allocate(capacity: newCapacity) }
        let header = header(of: bytes)
        if header.pointee.capacity >= newCapacity { return bytes }
        if header.pointee.mappedLength == 0, newCapacity < largeCapacity {
            let base = realloc(bytes - headerSize, headerSize + newCapacity)!
            base.assumingMemoryBound(to: Header.self).pointee.capacity = newCapacity
            return base + headerSize
        }
        let moved = allocate(capacity: newCapacity)
        moved.copyMemory(from: bytes, byteCount: min(oldCapacity, header.pointee.capacity))
        deallocate(bytes)
        return moved
    }

    private static let hugePageSize = 2 << 20

    private static func roundUp(_ value: Int, to multiple: Int) -> Int {
        (value + multiple - 1) / multiple * multiple
    }
}

private func payloadAllocate(_ size: Int) -> UnsafeMutableRawPointer? {
    PayloadMemory.allocate(capacity: size)
}

private func payloadReallocate(
    _ bytes: UnsafeMutableRawPointer?,
    _ oldSize: Int,
    _ newSize: Int
) -> UnsafeMutableRawPointer? {
    PayloadMemory.reallocate(bytes, oldCapacity: oldSize, newCapacity: newSize)
}

private func payloadDeallocate(_ bytes: UnsafeMutableRawPointer) {
    PayloadMemory.deallocate(bytes)
}

private func payloadCopy(_ destination: UnsafeMutableRawPointer, _ source: UnsafeRawPointer, _ count: Int) {
    destination.copyMemory(from: source, byteCount: count)
}
