import MultipeerSession
import Testing

@testable import MultipeerSync

/// A record's fields as the merge takes them (docs/SYNC.md 1).
@Suite struct RecordFieldsTests {
    struct Whole: SyncRecord, Equatable {
        var id: String
        var text: String
    }

    struct Fields: SyncRecord, Equatable {
        static var merge: SyncMerge { .fieldByField }
        static var collectionName: String { "checklist" }
        var id: String
        var title: String
        var count: Int
        var ratio: Double
        var done: Bool
        var remark: String?
        var tags: [String]
    }

    @Test func aWholeRecordIsOneFieldHoldingItsPayload() throws {
        let record = Whole(id: "1", text: "hello")
        let fields = try RecordFields.fields(of: record)
        #expect(fields == ["": try MessageEncoding.binary.encode(record)])
        #expect(try RecordFields.record(Whole.self, id: "1", from: fields) == record)
        #expect(Whole.collectionName == "Whole")
    }

    @Test func fieldByFieldEachPropertyIsAFieldAndNilIsNull() throws {
        let record = Fields(id: "f", title: "Fuel", count: 2, ratio: 0.5, done: true, remark: nil, tags: ["a", "b"])
        let fields = try RecordFields.fields(of: record)
        #expect(Set(fields.keys) == ["id", "title", "count", "ratio", "done", "remark", "tags"])
        #expect(fields["remark"] == RecordFields.null, "nil is written, as null")
        #expect(fields["title"] == (try MessageEncoding.binary.encode("Fuel")))
        #expect(try RecordFields.record(Fields.self, id: "f", from: fields) == record)

        var withNull = fields
        withNull["remark"] = nil
        #expect(try RecordFields.record(Fields.self, id: "f", from: withNull) == record, "absent reads as nil too")
        withNull["remark"] = try MessageEncoding.binary.encode("low")
        #expect(try RecordFields.record(Fields.self, id: "f", from: withNull).remark == "low")
    }

    /// A field this build does not know is ignored when reading; one of another type, or one
    /// missing, makes the record unreadable, naming it.
    @Test func unknownFieldsAreIgnoredAndBadOnesNamed() throws {
        var fields = try RecordFields.fields(of: Fields(id: "f", title: "T", count: 1, ratio: 1, done: false, tags: []))
        fields["addedByANewerBuild"] = try MessageEncoding.binary.encode([1, 2, 3])
        #expect(try RecordFields.record(Fields.self, id: "f", from: fields).title == "T")

        fields["count"] = try MessageEncoding.binary.encode("many")
        let error = #expect(throws: SyncError.self) { try RecordFields.record(Fields.self, id: "f", from: fields) }
        #expect(error?.code == .undecodableRecord)
        #expect(error?.message.contains("count") == true, "\(String(describing: error))")

        fields["count"] = nil
        #expect(throws: SyncError.self) { try RecordFields.record(Fields.self, id: "f", from: fields) }
        #expect(throws: SyncError.self, "a whole record read from fields") {
            try RecordFields.record(Whole.self, id: "f", from: fields)
        }
    }
}
