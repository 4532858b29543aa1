#if FUZZING
import CFuzzer
#else
import Foundation
#endif

/// One input in, 0 out; traps (and sanitizer reports) are what libFuzzer looks for.
public typealias FuzzTarget = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

#if FUZZING
/// Runs libFuzzer's driver on `target` with the process's arguments (`-max_total_time=60
/// CORPUS_DIR`, ...): a fuzz target's entry point in the fuzzing build (`scripts/fuzz.sh`).
public func runLibFuzzer(
    _ argc: Int32,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ target: FuzzTarget
) -> Int32 {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, target)
}
#else
/// Runs `target` once on every input of the files and directories the process's arguments
/// name (a seed corpus), prints how many, and exits: a fuzz target's entry point in a normal
/// build, which `make test` runs over `Fuzz/Corpus` without the fuzzing build's
/// instrumentation (a trap in the target stops it, naming nothing; the input it was on is the
/// last one printed with `-v`). Without arguments it says how to fuzz. It never returns.
public func replayCorpus(_ target: FuzzTarget) {
    var arguments = CommandLine.arguments.dropFirst()
    let verbose = arguments.first == "-v"
    if verbose { arguments = arguments.dropFirst() }
    guard !arguments.isEmpty else {
        print("A libFuzzer target: make fuzz fuzzes it (Fuzz/README.md). Given files or directories,")
        print("it runs each input once.")
        exit(64)
    }
    var inputs: [URL] = []
    for argument in arguments {
        let url = URL(fileURLWithPath: argument)
        if let names = try? FileManager.default.contentsOfDirectory(atPath: argument) {
            inputs += names.sorted().map { url.appendingPathComponent($0) }
        } else {
            inputs.append(url)
        }
    }
    for input in inputs {
        guard let data = FileManager.default.contents(atPath: input.path) else {
            print("cannot read \(input.path)")
            exit(66)
        }
        if verbose { print(input.path) }
        _ = Array(data).withUnsafeBufferPointer { target($0.baseAddress, $0.count) }
    }
    print("\(inputs.count) inputs run, no crash")
    exit(0)
}
#endif

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
