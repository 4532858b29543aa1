import MultipeerCore
import Testing

@Suite struct RememberedEndsTests {
    @Test func aKeysLatestEndIsRemembered() {
        var ends = RememberedEnds<String, Int>(capacity: 4)
        #expect(ends["a"] == nil)
        ends.remember("a", 1)
        ends.remember("b", 2)
        ends.remember("a", 3)
        #expect(ends["a"] == 3)
        #expect(ends["b"] == 2)
        #expect(ends.count == 2)  // a key once, however often it ended
    }

    @Test func theOldestEndIsForgottenBeyondTheCapacity() {
        var ends = RememberedEnds<Int, String>(capacity: 3)
        for key in 1...5 { ends.remember(key, "end \(key)") }
        #expect(ends.count == 3)
        #expect(ends[1] == nil)
        #expect(ends[2] == nil)
        #expect(ends[3] == "end 3")
        #expect(ends[5] == "end 5")
    }

    @Test func anEndRememberedAgainIsTheNewestAndOutlivesOlderOnes() {
        var ends = RememberedEnds<Int, String>(capacity: 2)
        ends.remember(1, "first")
        ends.remember(2, "second")
        ends.remember(1, "again")  // now the newest: 2 is the oldest
        ends.remember(3, "third")
        #expect(ends[1] == "again")
        #expect(ends[2] == nil)
        #expect(ends[3] == "third")
    }
}
