import Testing

@testable import NavlogSync

@Suite struct CommandTests {
    @Test func addTakesKeyValuePairsWithQuotesAndAliases() throws {
        let command = try NavlogCommand(
            line: #"add wpt=TESAT leg=3 eta=10:05 fuel=12500 alt=37000 remarks="light chop, \"smooth\" above""#
        )
        #expect(
            command
                == .add([
                    .waypoint: "TESAT", .leg: "3", .planned: "10:05", .fuel: "12500", .altitude: "37000",
                    .remarks: #"light chop, "smooth" above"#,
                ])
        )
    }

    @Test func editAndDeleteNameAnEntryAndAnEmptyValueClearsAField() throws {
        #expect(
            try NavlogCommand(line: "  edit 3f2a actual=10:07 remarks=  ")
                == .edit(idPrefix: "3f2a", [.actual: "10:07", .remarks: String?.none])
        )
        #expect(try NavlogCommand(line: "delete 3f2a") == .delete(idPrefix: "3f2a"))
        #expect(try NavlogCommand(line: "LIST") == .list)
        #expect(
            try NavlogCommand(line: #"attach 3f2a "/tmp/weather chart.pdf""#)
                == .attach(idPrefix: "3f2a", path: "/tmp/weather chart.pdf")
        )
        #expect(
            try NavlogCommand(line: "save 3f2a chart.pdf /tmp/out.pdf")
                == .save(idPrefix: "3f2a", name: "chart.pdf", path: "/tmp/out.pdf")
        )
        #expect(try NavlogCommand(line: "") == nil)
        #expect(try NavlogCommand(line: "# a comment") == nil)
    }

    @Test(arguments: [
        ("frobnicate", "unknown command \"frobnicate\""),
        ("add leg=2", "add needs waypoint=NAME"),
        ("add waypoint=A fuel=lots", "fuel=lots is not valid"),
        ("add waypoint=A planned=25:00", "planned=25:00 is not valid"),
        ("add waypoint=A altitude=99999", "altitude=99999 is not valid"),
        (
            "add waypoint=A remarks=\"clear\u{1B}[2J\"",
            #"remarks=clear\u{1B}[2J is not valid: expected text without control characters"#
        ),
        ("add waypoint=A colour=red", "unknown key \"colour\""),
        ("add waypoint=A leg", "\"leg\" is not KEY=VALUE"),
        (#"add waypoint="A"#, "a quote is not closed"),
        ("edit", "edit needs an entry id"),
        ("edit 3f2a", "edit needs at least one KEY=VALUE"),
        ("edit 3f2a waypoint=", "the waypoint cannot be empty"),
        ("delete", "delete takes one entry id"),
        ("quit now", "quit takes no arguments"),
    ])
    func badLinesSayWhatIsWrong(line: String, expected: String) {
        #expect {
            _ = try NavlogCommand(line: line)
        } throws: { error in
            guard let error = error as? NavlogError else { return false }
            return error.code == .badCommand && error.message.contains(expected)
        }
    }

    @Test func applyingChangesSetsAndClearsFields() {
        let fields = NavlogFields(leg: 1, waypoint: "TESAT", fuel: 100, remarks: "x")
        let changed = fields.applying([.fuel: "90", .remarks: String?.none, .actual: "11:00"])
        #expect(changed == NavlogFields(leg: 1, waypoint: "TESAT", actual: "11:00", fuel: 90))
    }
}
