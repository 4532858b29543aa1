import Foundation
import MultipeerCore
import NIOCore
import Testing

/// The message types a peer reads: in HELLO, in TYPES, and what a sender does with them.
@Suite struct MessageTypeTests {
    static func hello(reads: MessageTypeList?, features: Hello.Features = [.resources, .streams]) throws -> Hello {
        let identity = TestSigner()
        var hello = try Hello(
            peerID: identity.key.peerID,
            key: identity.key,
            incarnation: 1,
            displayName: "Nav",
            maximumMessageLength: 1 << 20
        )
        hello.features = features
        hello.reads = reads
        return try hello.signed(exporter: HelloTests.exporter, side: .dialler, sign: identity.sign)
    }

    static func frame(_ message: LinkMessage) throws -> LinkMessage {
        var bytes = ByteBuffer()
        message.writeFrame(to: &bytes)
        var decoder = FrameDecoder()
        return try LinkMessage(frame: try #require(try decoder.decode(buffer: &bytes)))
    }

    @Test func aHelloCarriesTheTypesItsSenderReadsAndItsBit() throws {
        let reads = try MessageTypeList(["Weather", "Note", "Ä"])
        let encoded = HelloTests.encode(try Self.hello(reads: reads))
        let hello = try Hello(decoding: encoded)
        #expect(hello.reads == reads)
        #expect(
            hello.features == [.resources, .streams],
            "the types' bit is read into reads, not kept among the features"
        )
        // A HELLO that says nothing of the types its sender reads: every type.
        #expect(try Hello(decoding: HelloTests.encode(Self.hello(reads: nil))).reads == nil)
        // An empty list is a list: its sender reads no type at all.
        #expect(
            try Hello(decoding: HelloTests.encode(Self.hello(reads: MessageTypeList([])))).reads == MessageTypeList([])
        )
    }

    @Test func theBitWithoutItsListIsMalformed() throws {
        // The features field says a list follows, and the signature comes instead: an empty
        // list's count taken out from before the signature.
        var bytes = Array(HelloTests.encode(try Self.hello(reads: MessageTypeList([]))).readableBytesView)
        #expect(bytes[bytes.count - Hello.signatureLength - 2..<bytes.count - Hello.signatureLength] == [0, 0])
        bytes.removeSubrange(bytes.count - Hello.signatureLength - 2..<bytes.count - Hello.signatureLength)
        let error = try #require(throws: MultipeerError.self) { try Hello(decoding: ByteBuffer(bytes: bytes)) }
        #expect(error.code == .malformedMessage)
    }

    @Test func namesOutOfOrderTwiceOrEmptyAreMalformed() throws {
        for names in [["b", "a"], ["a", "a"], [""]] {
            var value = ByteBuffer()
            value.writeInteger(UInt8(0))
            value.writeInteger(UInt16(names.count))
            for name in names {
                value.writeInteger(UInt8(name.utf8.count))
                value.writeString(name)
            }
            let error = try #require(throws: MultipeerError.self, "\(names)") {
                try LinkMessage(frame: Frame(type: .types, value: value))
            }
            #expect(error.code == .malformedMessage)
            #expect(error.message.hasPrefix("TYPES is malformed"))
        }
        var trailing = ByteBuffer()
        MessageTypesRead.only(try MessageTypeList(["a"])).encode(into: &trailing)
        trailing.writeInteger(UInt8(0))
        #expect(throws: MultipeerError.self) { try LinkMessage(frame: Frame(type: .types, value: trailing)) }
        // A mode this version does not define, and a value without one (the form of an earlier draft).
        var mode = ByteBuffer()
        mode.writeMultipleIntegers(UInt8(2), UInt16(0))
        let error = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Frame(type: .types, value: mode))
        }
        #expect(error.code == .malformedMessage && error.message.contains("mode 2"), "\(error)")
        #expect(throws: MultipeerError.self) { try LinkMessage(frame: Frame(type: .types, value: ByteBuffer())) }
    }

    @Test func typesRoundTripsBothModes() throws {
        let list = try MessageTypeList(["NavlogMessage", "Note"])
        for reads in [MessageTypesRead.only(list), .allBut(list), .every, .only(.empty)] {
            #expect(try Self.frame(.types(reads)) == .types(reads))
        }
        #expect(MessageTypesRead.every.contains("Anything") && !MessageTypesRead.only(.empty).contains("Anything"))
        #expect(MessageTypesRead.allBut(list).contains("Weather") && !MessageTypesRead.allBut(list).contains("Note"))
    }

    /// Bit 3 says a side takes TYPES without a list of its own (a session that declares nothing);
    /// a list implies it.
    @Test func theTakesTypesBitIsKeptAndAListImpliesIt() throws {
        let bare = try Hello(decoding: HelloTests.encode(Self.hello(reads: nil, features: [.resources])))
        #expect(!bare.takesTypes, "an earlier release's HELLO")
        let takes = try Hello(decoding: HelloTests.encode(Self.hello(reads: nil, features: [.takesTypes])))
        #expect(takes.takesTypes && takes.reads == nil)
        let listing = try Hello(decoding: HelloTests.encode(Self.hello(reads: MessageTypeList(["Note"]))))
        #expect(listing.takesTypes && !listing.features.contains(.takesTypes))
    }

    @Test func aListIsBoundedByTheRoomHelloHasForIt() throws {
        let long = (0..<40).map { String(repeating: "x", count: 200) + "\($0)" }
        let error = try #require(throws: MultipeerError.self) { try MessageTypeList(long) }
        #expect(error.code == .invalidArgument)
        #expect(throws: MultipeerError.self) { try MessageTypeList([String(repeating: "y", count: 256)]) }
        // The largest list fits the largest HELLO this version sends.
        var names: [String] = []
        while (try? MessageTypeList(names + ["n\(names.count)" + String(repeating: "z", count: 250)])) != nil {
            names.append("n\(names.count)" + String(repeating: "z", count: 250))
        }
        let metadata = Dictionary(
            uniqueKeysWithValues: (0..<Hello.maximumMetadataCount).map {
                (String(format: "k%02d", $0), String(repeating: "v", count: Hello.maximumMetadataEntryLength - 4))
            }
        )
        let identity = TestSigner()
        var hello = try Hello(
            peerID: identity.key.peerID,
            key: identity.key,
            incarnation: 1,
            displayName: String(repeating: "N", count: Hello.maximumDisplayNameLength),
            metadata: metadata,
            maximumMessageLength: 1 << 20
        )
        hello.features = .known
        let largest = HelloTests.encode(
            try hello.signed(exporter: HelloTests.exporter, side: .dialler, sign: identity.sign)
        )
        #expect(largest.readableBytes == 8_590, "PROTOCOL.md 3: the largest HELLO without message types")
        hello.reads = try MessageTypeList(names)
        #expect(
            hello.reads!.encodedLength > MessageTypeList.maximumEncodedLength - 256,
            "a list as long as it may be, within a name"
        )
        let encoded = HelloTests.encode(
            try hello.signed(exporter: HelloTests.exporter, side: .dialler, sign: identity.sign)
        )
        #expect(
            encoded.readableBytes <= 8_590 + MessageTypeList.maximumEncodedLength,
            "PROTOCOL.md 3: at most 14,734 bytes"
        )
        #expect(encoded.readableBytes <= Hello.maximumLength)
        #expect(try Hello(decoding: encoded).reads?.names.count == names.count)
    }

    // MARK: The sender

    static let policy = PeerDeliveryStateMachine.Policy(
        limits: BufferLimits(maximumCount: 8, maximumBytes: 1 << 20),
        unreliableLimits: BufferLimits(maximumCount: 8, maximumBytes: 1 << 20),
        failWhenFull: false,
        sendTimeout: .seconds(30)
    )

    static func message(_ typeName: String) throws -> DataMessage {
        try DataMessage(sequence: 0, typeName: typeName, payload: ByteBuffer(string: "{}"))
    }

    @Test func aTypeThePeerDoesNotReadIsRefusedNamingPeerAndType() throws {
        var delivery = PeerDeliveryStateMachine(peerID: UUID(), policy: Self.policy)
        delivery.linkUp(
            LinkID(1),
            incarnation: 7,
            frameLimit: 1 << 20,
            messageLimit: 1 << 20,
            reads: .only(try MessageTypeList(["Note"]))
        )
        try delivery.checkFits(Self.message("Note"), localLimits: (1 << 20, 1 << 20))
        let error = try #require(throws: MultipeerError.self) {
            try delivery.checkFits(Self.message("Weather"), localLimits: (1 << 20, 1 << 20))
        }
        #expect(error.code == .messageTypeNotRead)
        #expect(
            error.message.contains("\(delivery.peerID)") && error.message.contains("\"Weather\"")
                && error.message.contains("it reads: Note")
        )
        // The peer subscribes to it: TYPES on its link, and the type goes.
        let subscribed = delivery.peerReads(.only(try MessageTypeList(["Note", "Weather"])), on: LinkID(1))
        #expect(subscribed == [.wakeSenders])
        try delivery.checkFits(Self.message("Weather"), localLimits: (1 << 20, 1 << 20))
        // TYPES on a link that is not the peer's changes nothing.
        let elsewhere = delivery.peerReads(.only(.empty), on: LinkID(2))
        #expect(elsewhere.isEmpty)
        try delivery.checkFits(Self.message("Weather"), localLimits: (1 << 20, 1 << 20))
        // A peer that reads every type.
        let every = delivery.peerReads(.every, on: LinkID(1))
        #expect(every == [.wakeSenders])
        try delivery.checkFits(Self.message("Anything"), localLimits: (1 << 20, 1 << 20))
        // A peer that declared nothing and refused a type: every type but that one, until it says
        // otherwise (a TYPES replaces what the peer reads, whole: a list may shrink).
        _ = delivery.peerReads(.allBut(try MessageTypeList(["Weather"])), on: LinkID(1))
        try delivery.checkFits(Self.message("Anything"), localLimits: (1 << 20, 1 << 20))
        let refused = try #require(throws: MultipeerError.self) {
            try delivery.checkFits(Self.message("Weather"), localLimits: (1 << 20, 1 << 20))
        }
        #expect(
            refused.code == .messageTypeNotRead && refused.message.contains("nothing there subscribes"),
            "\(refused)"
        )
        _ = delivery.peerReads(.every, on: LinkID(1))
        try delivery.checkFits(Self.message("Weather"), localLimits: (1 << 20, 1 << 20))
    }

    @Test func aBroadcastSkipIsReportedOncePerTypeReasonAndLink() {
        var delivery = PeerDeliveryStateMachine(peerID: UUID(), policy: Self.policy)
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        let skips = ["Weather", "Weather", "Chart"].map { delivery.firstSkip(of: $0, because: .messageTypeNotRead) }
        #expect(skips == [true, false, true])
        let full = delivery.firstSkip(of: "Weather", because: .outboxFull)
        #expect(full, "another reason is reported too")
        _ = delivery.linkDown(LinkID(1), now: .now)
        let whileAway = ["Weather", "Weather"].map { delivery.firstSkip(of: $0, because: .outboxFull) }
        #expect(whileAway == [true, false], "once more while the peer is away")
        delivery.linkUp(LinkID(2), incarnation: 7, frameLimit: 1 << 20)
        let again = delivery.firstSkip(of: "Weather", because: .messageTypeNotRead)
        #expect(again, "a new link reports again")
    }

    @Test func queuedMessagesOfATypeTheReturningPeerNoLongerReadsAreDroppedAndNumberedAround() throws {
        var delivery = PeerDeliveryStateMachine(peerID: UUID(), policy: Self.policy)
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20, messageLimit: 1 << 20)
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        _ = delivery.linkDown(now: .now)
        for name in ["Note", "Weather", "Note"] {
            guard case .queued = delivery.enqueue(typeName: name, payload: ByteBuffer(string: "{}"), now: .now) else {
                Issue.record("queued for a peer met")
                return
            }
        }
        let waiting = delivery.waitForAcknowledgement(of: 2)
        let waiter = try #require(waiting)
        // It comes back, another build that reads Note alone.
        delivery.linkUp(
            LinkID(2),
            incarnation: 8,
            frameLimit: 1 << 20,
            messageLimit: 1 << 20,
            reads: .only(try MessageTypeList(["Note"]))
        )
        let actions = delivery.acknowledged(through: 0, on: LinkID(2))
        #expect(actions.contains(.dropped(typeNames: ["Weather"], .notRead)))
        #expect(
            delivery.nextBatch(for: LinkID(2))?.frames.map(\.sequence) == [1, 2],
            "the two Notes, numbered without a gap"
        )
        guard case .failed(let error) = delivery.acknowledgement(for: waiter, now: .now) else {
            Issue.record("the wait for the dropped message fails")
            return
        }
        #expect(error.code == .messageTypeNotRead)
    }

    // MARK: The receiver

    /// A session that declared what it reads refuses every other type at once, and a subscription
    /// adds a type to its list.
    @Test func aDeclaringReceiverRefusesWhatItDidNotDeclare() throws {
        var types = MessageTypesStateMachine(declared: try MessageTypeList(["Note"]))
        #expect(types.reads == .only(try MessageTypeList(["Note"])))
        #expect(
            types.unsubscribed("Note", hold: .none(heldNames: 0), maximumHeldNames: 16) == .hold(stopsWhenFull: true)
        )
        guard
            case .refuse(let reason, let announce) = types.unsubscribed(
                "Weather",
                hold: .none(heldNames: 0),
                maximumHeldNames: 16
            )
        else {
            Issue.record("Weather is not declared")
            return
        }
        #expect(
            !announce && reason.contains("does not read messages of type \"Weather\" (it reads: Note)"),
            "\(reason)"
        )
        let added = types.subscribed("Weather")
        #expect(added)
        #expect(types.reads == .only(try MessageTypeList(["Note", "Weather"])))
        let again = types.subscribed("Weather")
        #expect(!again, "subscribed once, nothing changes")
    }

    /// A session that declared nothing holds a type nothing subscribes to within its bound, then
    /// refuses it (and says so: every type but it), never stopping a link; a subscription reads
    /// it again, and a type subscribed to once is held with the links stopped behind it.
    @Test func aReceiverThatDeclaredNothingHoldsATypeOnTrialThenRefusesIt() throws {
        var types = MessageTypesStateMachine(declared: nil)
        #expect(types.reads == .every)
        let room = MessageTypesStateMachine.Hold.holding(count: 3, isFull: false)
        #expect(
            types.unsubscribed("Weather", hold: room, maximumHeldNames: 16) == .hold(stopsWhenFull: false)
        )
        let full = MessageTypesStateMachine.Hold.holding(count: 256, isFull: true)
        guard
            case .refuse(let reason, true) = types.unsubscribed(
                "Weather",
                hold: full,
                maximumHeldNames: 16
            )
        else {
            Issue.record("the hold is full: refused, and announced")
            return
        }
        #expect(reason.contains("held the first 256"), "\(reason)")
        #expect(types.reads == .allBut(try MessageTypeList(["Weather"])))
        // Refused from now on, announced once.
        #expect(
            types.unsubscribed("Weather", hold: full, maximumHeldNames: 16)
                == .refuse(
                    reason:
                        "this peer does not read messages of type \"Weather\": nothing there subscribes to it, and it refused them since it held as many as it holds for a first subscriber; it may run another build of the application",
                    announce: false
                )
        )
        // One name beyond the names held: refused at once.
        guard
            case .refuse(let beyond, true) = types.unsubscribed(
                "Chart",
                hold: .none(heldNames: 16),
                maximumHeldNames: 16
            )
        else {
            Issue.record("one name beyond the most held: refused")
            return
        }
        #expect(beyond.contains("16 other types"), "\(beyond)")
        #expect(types.reads == .allBut(try MessageTypeList(["Chart", "Weather"])))
        // Subscribed to: read again, and held with the links stopped behind it from then on.
        let readAgain = types.subscribed("Weather")
        #expect(readAgain)
        #expect(types.reads == .allBut(try MessageTypeList(["Chart"])))
        #expect(
            types.unsubscribed("Weather", hold: full, maximumHeldNames: 16) == .hold(stopsWhenFull: true)
        )
    }

    /// A declaration that a subscription takes past what a list holds makes the session read as
    /// one that declared nothing: it holds other types on trial rather than refuse them.
    @Test func aListThatOverflowsReadsAsNoDeclaration() throws {
        let long = (0..<24).map { String(repeating: "x", count: 250) + "\($0)" }
        var types = MessageTypesStateMachine(declared: try MessageTypeList(long))
        let changed = types.subscribed(String(repeating: "y", count: 255))
        #expect(changed)
        #expect(types.reads == .every)
        #expect(
            types.unsubscribed("Weather", hold: .none(heldNames: 0), maximumHeldNames: 16)
                == .hold(stopsWhenFull: false)
        )
        #expect(
            types.unsubscribed(long[0], hold: .none(heldNames: 0), maximumHeldNames: 16) == .hold(stopsWhenFull: true)
        )
    }
}
