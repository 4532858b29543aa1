#if canImport(Glibc)
import Glibc
#endif
@_spi(CustomByteBufferAllocator) package import NIOCore
import Synchronization

/// Where message payloads live: a `ByteBufferAllocator` whose large buffers (1 MiB and more)
/// are mappings of their own, asking for transparent huge pages, and kept for the next large
/// buffer when released, instead of handed back to the system.
///
/// A large message's payload is written once by the sender's encoder and once by the
/// receiver's reassembly. With `malloc`, each of those is a fresh `mmap` (glibc maps every
/// allocation above 32 MiB), faulted in and zeroed 4 KiB at a time: measured, a third of the
/// CPU that moving a 64 MiB message takes. A mapping used again costs no fault at all; a new
/// one costs a fault per 2 MiB where the kernel grants huge pages.
///
/// What is kept is bounded: at most ``spareLimit`` mappings, ``spareBytesLimit`` bytes in all;
/// their pages are marked free to the kernel (`MADV_FREE`), which takes them back under memory
/// pressure, and a spare unused for ``spareLifetime`` is unmapped at the next large allocation
/// or release. Smaller buffers come from `malloc` as usual.
package enum PayloadMemory {
    /// The allocator for payloads: the encoder's output and the receiver's reassembly.
    package static let allocator = ByteBufferAllocator(
        allocate: payloadAllocate, reallocate: payloadReallocate, deallocate: payloadDeallocate, copy: payloadCopy)

    /// Buffers of at least this capacity are mappings of their own.
    package static let largeCapacity = 1 << 20
    /// The most spare mappings kept.
    package static let spareLimit = 4
    /// The most bytes of spare mappings kept, in all: address space, four buffers of a 64 MiB
    /// message (NIO rounds a capacity up to a power of two: 128 MiB each, half of it touched).
    package static let spareBytesLimit = 1 << 30
    /// A spare not used again within this is unmapped (at the next large allocation or release).
    package static let spareLifetime = Duration.seconds(5)

    /// The spare mappings and their bytes now (for tests and benchmarks).
    package static var spares: (count: Int, bytes: Int) {
        pool.withLock { ($0.spares.count, $0.spares.reduce(0) { $0 + $1.length }) }
    }

    /// How many mappings were made so far, spares taken again not counted (for benchmarks: a
    /// flow of large messages is warm once it makes no more).
    package static var mappingsMade: Int { mappings.load(ordering: .relaxed) }

    /// Unmaps every spare mapping.
    package static func releaseSpares() {
        let released = pool.withLock { pool in
            defer { pool.spares.removeAll() }
            return pool.spares
        }
        for spare in released { munmap(spare.base, spare.length) }
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
    fileprivate struct Spare: @unchecked Sendable {
        var base: UnsafeMutableRawPointer
        var length: Int
        var released: ContinuousClock.Instant
    }

    fileprivate struct Pool {
        var spares: [Spare] = []

        /// Takes the smallest spare of at least `length` bytes, and at most twice that (a small
        /// message's buffer, which an application may keep, never holds a large mapping).
        mutating func take(length: Int) -> Spare? {
            var best: Int?
            for (index, spare) in spares.enumerated() where spare.length >= length && spare.length <= 2 * length {
                if best.map({ spare.length < spares[$0].length }) ?? true { best = index }
            }
            return best.map { spares.remove(at: $0) }
        }

        /// Spares unused for longer than their lifetime, removed.
        mutating func expired(now: ContinuousClock.Instant) -> [Spare] {
            let old = spares.filter { now - $0.released > PayloadMemory.spareLifetime }
            if !old.isEmpty { spares.removeAll { now - $0.released > PayloadMemory.spareLifetime } }
            return old
        }
    }

    fileprivate static let pool = Mutex(Pool())
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
        let (spare, expired) = pool.withLock { pool in (pool.take(length: wanted), pool.expired(now: now)) }
        for old in expired { munmap(old.base, old.length) }
        let base: UnsafeMutableRawPointer
        let length: Int
        if let spare {
            (base, length) = (spare.base, spare.length)
        } else {
            guard let mapped = mmap(nil, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  mapped != MAP_FAILED else { fatalError("PayloadMemory: mmap of \(wanted) bytes failed: \(String(cString: strerror(errno)))") }
            _ = madvise(mapped, wanted, MADV_HUGEPAGE)  // a hint: without it, 4 KiB pages
            mappings.add(1, ordering: .relaxed)
            (base, length) = (mapped, wanted)
        }
        base.initializeMemory(as: Header.self, repeating: Header(capacity: length - headerSize, mappedLength: length), count: 1)
        return base + headerSize
    }

    fileprivate static func deallocate(_ bytes: UnsafeMutableRawPointer) {
        let header = header(of: bytes).pointee
        let base = bytes - headerSize
        guard header.mappedLength > 0 else { return free(base) }
        // Lazily freed: the pages stay mapped for the next large buffer unless the kernel needs them.
        _ = madvise(base, header.mappedLength, MADV_FREE)
        let now = ContinuousClock.now
        let unmap: [Spare] = pool.withLock { pool in
            var unmap = pool.expired(now: now)
            pool.spares.append(Spare(base: base, length: header.mappedLength, released: now))
            // Over the bound: the oldest go.
            while pool.spares.count > spareLimit || pool.spares.reduce(0, { $0 + $1.length }) > spareBytesLimit {
                unmap.append(pool.spares.removeFirst())
            }
            return unmap
        }
        for spare in unmap { munmap(spare.base, spare.length) }
    }

    fileprivate static func reallocate(_ bytes: UnsafeMutableRawPointer?, oldCapacity: Int, newCapacity: Int) -> UnsafeMutableRawPointer {
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

private func payloadReallocate(_ bytes: UnsafeMutableRawPointer?, _ oldSize: Int, _ newSize: Int) -> UnsafeMutableRawPointer? {
    PayloadMemory.reallocate(bytes, oldCapacity: oldSize, newCapacity: newSize)
}

private func payloadDeallocate(_ bytes: UnsafeMutableRawPointer) {
    PayloadMemory.deallocate(bytes)
}

private func payloadCopy(_ destination: UnsafeMutableRawPointer, _ source: UnsafeRawPointer, _ count: Int) {
    destination.copyMemory(from: source, byteCount: count)
}
