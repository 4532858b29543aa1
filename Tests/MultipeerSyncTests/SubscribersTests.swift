import Testing

@testable import MultipeerSync

/// The store's streams to its readers (``Subscribers``): bounded, told what went, left when
/// dropped, ended with the store.
@Suite struct SubscribersTests {
    @Test func aBufferKeepsTheNewestAndSaysHowManyWentBeforeThem() async {
        let subscribers = Subscribers<Int>()
        let buffer = subscribers.subscribe(holding: 3) { $0 % 2 == 0 }
        for number in 0..<20 { subscribers.yield(number) }  // (ten taken: 0, 2, ..., 18)
        var reads: [String] = []
        for _ in 0..<4 {
            switch await buffer.next() {
            case .dropped(let count): reads.append("dropped \(count)")
            case .element(let number): reads.append("\(number)")
            case nil: reads.append("end")
            }
        }
        #expect(reads == ["dropped 7", "14", "16", "18"])
        subscribers.yield(20)
        if case .element(20) = await buffer.next() {} else { Issue.record("20 not read after the drop was told") }
    }

    @Test func aWaitingReaderIsWokenByAnElementAndEndsWhenCancelledOrWhenTheStoreGoes() async {
        var subscribers: Subscribers<Int>? = Subscribers<Int>()
        let buffer = subscribers!.subscribe(holding: 4)
        let reader = Task { await buffer.next() }  // (waiting, or not yet: the element is read either way)
        subscribers!.yield(7)
        if case .element(7) = await reader.value {} else { Issue.record("the reader did not get 7") }

        let cancelled = Task { await buffer.next() }
        cancelled.cancel()
        #expect(await cancelled.value == nil, "a cancelled read ends")

        subscribers!.yield(8)
        subscribers = nil  // (the store is gone)
        if case .element(8) = await buffer.next() {} else { Issue.record("8, held, not read before the end") }
        #expect(await buffer.next() == nil, "then the end")
    }

    @Test func aBufferNobodyHoldsLeaves() {
        let subscribers = Subscribers<Int>()
        weak var left: SubscriberBuffer<Int>?
        do {
            let buffer = subscribers.subscribe(holding: 2)
            left = buffer
            subscribers.yield(1)
        }
        #expect(left == nil, "not kept alive by the store")
        _ = subscribers.subscribe(holding: 2)
        subscribers.yield(2)  // (to no one: nothing held)
    }
}
