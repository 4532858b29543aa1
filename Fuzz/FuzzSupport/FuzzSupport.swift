#if FUZZING
import CFuzzer
#endif

/// One input in, 0 out; traps (and sanitizer reports) are what libFuzzer looks for.
public typealias FuzzTarget = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

/// Runs libFuzzer's driver on `target` with the process's arguments (`-max_total_time=60
/// CORPUS_DIR`, ...). A fuzz target's entry point calls this; in a normal build, where
/// libFuzzer is not linked, it says how to build the target instead.
public func runLibFuzzer(
    _ argc: Int32,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ target: FuzzTarget
) -> Int32 {
    #if FUZZING
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, target)
    #else
    print("This is a libFuzzer target: build and run it with make fuzz (Fuzz/README.md).")
    return 64
    #endif
}

/// The input as a byte array.
public func bytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    Array(UnsafeBufferPointer(start: data, count: size))
}

/// Runs `body`: an error of type `Refusal` is the decoder saying no, which is fine; any other
/// error is a finding.
public func refusalsOnly<Refusal: Error>(_ refusal: Refusal.Type, _ body: () throws -> Void) {
    do {
        try body()
    } catch is Refusal {
        // Refused with a reason.
    } catch {
        fatalError("an error that is not a \(Refusal.self): \(error)")
    }
}
