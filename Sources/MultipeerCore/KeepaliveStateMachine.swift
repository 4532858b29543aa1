/// Decides when a link is pinged and when a silent one is dead, without I/O: the shell reports
/// traffic each way and wakes it at ``nextWakeUp``; time is a `Duration` since any fixed origin
/// (a monotonic clock's reading).
///
/// Each side makes sure the other hears from it: a PING goes out whenever this side has sent
/// nothing for a while. And any inbound byte proves the peer alive, not just whole frames.
/// Together they keep a one-way bulk transfer alive: the receiver, busy reading, still pings
/// back, and the sender, whose own PINGs queue behind its data, hears those.
///
/// The side that dialled leads: it pings after an interval of quiet. The other follows: while
/// the leader's PINGs keep coming, its PONGs are its traffic; when none came for one and a half
/// intervals (the leader is busy sending, or gone), it pings after an interval of quiet like the
/// leader; and once every eight intervals it pings to measure the round trip from its side,
/// with the PONG of a leader's PING that arrives in the interval before that PING is due (the
/// two then share a TLS record and a write), or on its own when none does. An idle link so
/// carries one PING and one PONG per interval, not two of each (with the same rule on both
/// sides the two timers raced), and a PONG more every eight.
///
/// The silence that kills a link adapts to what this link has shown (``timeout``): one and a
/// half times the longest silence between two arrivals in the last two minutes, never less than
/// the configured timeout and never more than three times it (the ceiling). A clean link's
/// silences last about an interval, so it is timed out as configured; a lossy one, whose TCP
/// stalls for seconds now and then while it retransmits, is given room for the stalls it has
/// been seen to survive. Only silences that ended in an arrival count: a silence that ended in
/// a teardown is no evidence of a lossy path. What a peer's earlier links showed of its path
/// (``PathHistory``: the longest silence they survived, whether their transport ever showed a
/// packet lost) starts its next link off, so a link replacing one on a lossy path is not torn
/// down by the stall it was replaced after, while on a clean path a second fault is found as
/// fast as the first.
///
/// And a silence is not taken for death while the transport shows it to be a lossy path's.
/// Once the peer is overdue (silent for longer than ``overdue``, which a link in good health
/// never is), the shell reads the transport (``TransportReading``) at each wake-up:
/// - when the peer's segments arrive out of order (beyond a lost one TCP is still repairing),
///   the peer is sending: the link is kept until ``ceiling`` after the last reading that saw
///   more of them, and at the latest ``stallLimit`` after the last arrival;
/// - when the path has shown a packet lost (this link's TCP retransmitted between two readings of
///   a silence; TCP is repairing a loss at a reading; a segment of the peer's ever arrived out of
///   order on this connection; or the peer's earlier links saw one of these) and the peer's host
///   was heard after the last arrival (any segment, an acknowledgement
///   too, later than a delayed acknowledgement of it), the path loses packets with the host still
///   on it: the link is kept until ``ceiling`` after the last arrival. (A black hole is heard
///   from no more; a clean path loses nothing in its silences.)
/// - when the peer's host acknowledges everything this side sent (nothing unacknowledged, nothing
///   retransmitted since the silence began) and sends no segment of its own, on a path that has
///   never shown a packet lost, its application is hung (a frozen process): the link is timed
///   out at the configured timeout, whatever the silences of the link made ``timeout``
///   (``peerHung``). (On a lossy path a peer in loss recovery, its window down to a segment,
///   acknowledges and sends nothing new in just the same way.)
/// A dead path sends nothing, so it is timed out at ``timeout``; a frozen peer at the configured
/// timeout; a frozen peer whose kernel still acknowledges over a lossy path, at the ceiling.
///
/// And the peer's data that reached this side's kernel and is not read yet is no silence of the
/// peer's: the silence counts from the latest arrival the transport shows. (This side's event
/// loop busy with its own writes, its reads waiting, is this side's stall, not the link's.)
package struct KeepaliveStateMachine: Sendable {
    /// How far above the configured timeout the adaptive timeout may go, as a multiple.
    package static let ceilingFactor = 3
    /// How long a silence the transport shows to be a lossy path's stall may last, as a
    /// multiple of the configured timeout.
    package static let stallFactor = 10
    /// Longer than the peer's host may delay its acknowledgement of the last arrival (Linux: at
    /// most 200 ms): heard from after that, the host is on the path.
    static let acknowledgementDelay = Duration.milliseconds(250)
    /// How long a silence counts towards the adaptive timeout: 12 windows of 10 s.
    static let silenceWindow = Duration.seconds(10)
    static let silenceWindows = 12

    /// Which side of the link this is.
    package enum Role: Sendable {
        /// Dialled the link.
        case leading
        /// Accepted it.
        case following
    }

    package enum Action: Equatable, Sendable {
        /// Nothing to do until ``nextWakeUp``.
        case wait
        /// Send this PING.
        case sendPing(Probe)
        /// Nothing arrived for the timeout: close the link (GOODBYE `keepaliveTimeout` first).
        case timedOut
    }

    package let parameters: KeepaliveParameters
    package let role: Role
    /// The most ``timeout`` can be: ``ceilingFactor`` times the configured timeout.
    package let ceiling: Duration
    /// The longest silence kept while the transport shows the peer sending through a lossy
    /// path's stall: ``stallFactor`` times the configured timeout.
    package let stallLimit: Duration
    /// A wake-up later than this after it was due means this side was not running (a stalled
    /// event loop, starved threads, a suspended machine), not that the peer is silent: a fifth
    /// of an interval.
    package let lateLimit: Duration
    /// The longest silence of a peer in good health: an interval (the leader pings once an
    /// interval and the follower answers each PING) and a late wake-up's worth. Past it the
    /// transport is read at each wake-up. Not from an interval on: the leader wakes to ping
    /// an interval after its last PING, whose PONG came a round trip after it, so its wake-ups
    /// (rounded up to the shell's timer grid) find a silence of an interval, give or take a
    /// few milliseconds, and a transport read at each was the largest single cost of an idle
    /// mesh's wake-ups.
    package let overdue: Duration
    /// How long the follower waits for the leader's next PING before it pings: 1.5 intervals.
    private let leaderOverdue: Duration
    /// How often the follower pings to measure the round trip: every 8 intervals.
    private let samplePeriod: Duration
    private var lastInbound: Duration
    private var lastOutbound: Duration
    private var lastPing: Duration
    private var lastPingReceived: Duration
    private var nextNonce: UInt64 = 1
    private var finished = false
    /// A timeout found on a late wake-up waits for one more look, here.
    private var recheck: Duration?
    /// This side stopped reading (its application is behind): silence is then its own doing.
    package private(set) var readingPaused = false
    /// The longest silence between arrivals in each of the last windows, the newest last.
    private var longestSilences: [Duration] = [.zero]
    /// This side woke up late since the last arrival: the silence until the next says nothing
    /// about the link.
    private var stalledSinceArrival = false
    private var windowStart: Duration
    /// The transport as last read in this silence.
    private var transportLatest: TransportReading?
    /// This silence has shown packets lost with the peer's host still answering.
    private var lossyPath = false
    /// When the peer was last seen sending in this silence (its segments arriving out of order).
    private var peerSending: Duration?
    /// The transport's latest reading in this silence shows the peer's host acknowledging all
    /// this side sent, nothing retransmitted and nothing of its own sent, on a path that never
    /// lost a packet: its application is hung.
    package private(set) var peerHung = false
    /// The transport of this link, or of the peer's earlier links, showed a packet lost.
    private var lossSeen: Bool
    /// When the peer's latest data reached this side's kernel, where that is after the last
    /// arrival read (``inboundActivity(now:)``): the data waits unread.
    private var unreadArrival: Duration?

    /// - Parameter path: What the peer's earlier links showed of the path (``history``).
    package init(parameters: KeepaliveParameters, role: Role = .leading, now: Duration, path: PathHistory = PathHistory()) {
        self.parameters = parameters
        self.role = role
        // Worked out once: Duration's arithmetic is 128-bit, and wake-ups are many.
        self.ceiling = parameters.timeout * Self.ceilingFactor
        self.stallLimit = parameters.timeout * Self.stallFactor
        self.lateLimit = parameters.interval / 5
        self.overdue = parameters.interval + lateLimit
        self.leaderOverdue = parameters.interval * 3 / 2
        self.samplePeriod = parameters.interval * 8
        self.lastInbound = now
        self.lastOutbound = now
        self.lastPing = now
        self.lastPingReceived = now
        self.windowStart = now
        self.longestSilences = [path.longestSilence]
        self.lossSeen = path.lossSeen
        self.timeout = parameters.timeout
        refreshTimeout()
    }

    /// The longest silence of the last two minutes that ended in an arrival.
    package var longestRecentSilence: Duration { longestSilences.max() ?? .zero }

    /// What this link showed of its path, for the peer's next link: the silences it survived
    /// (never the one it may be ending with), and whether a packet was lost.
    package var history: PathHistory { PathHistory(longestSilence: longestRecentSilence, lossSeen: lossSeen) }

    /// What the transport showed at the latest reading of the silence under way (nil before
    /// the peer was overdue, or where it cannot tell): for the report of a timeout.
    package var transportInSilence: TransportReading? { transportLatest }

    /// Whether this link, or the peer's earlier links, showed a packet lost.
    package var hasSeenLoss: Bool { lossSeen }

    /// How long the peer has been silent now.
    package func silence(now: Duration) -> Duration { max(.zero, now - lastInbound) }

    /// The silence after which the link is dead now: 1.5 times the longest silence of the last
    /// two minutes, between the configured timeout and ``ceilingFactor`` times it. (Kept as the
    /// silences change, not worked out at every wake-up.)
    package private(set) var timeout: Duration

    private mutating func refreshTimeout() {
        timeout = min(max(longestRecentSilence * 3 / 2, parameters.timeout), ceiling)
    }

    /// The peer's last arrival: read, or waiting in this side's kernel to be.
    private var lastArrival: Duration { max(lastInbound, unreadArrival ?? lastInbound) }

    /// When the silence under way times the link out: ``timeout`` after the last arrival, or
    /// later as the transport shows (see the type's description).
    private var timeoutDue: Duration {
        if peerHung { return lastArrival + parameters.timeout }
        var due = lastArrival + (lossyPath ? ceiling : timeout)
        if let peerSending { due = min(max(due, peerSending + ceiling), lastInbound + stallLimit) }
        return due
    }

    /// When this side pings for having been quiet.
    private var quietDue: Duration {
        let quiet = lastOutbound + parameters.interval
        return role == .leading ? quiet : max(quiet, lastPingReceived + leaderOverdue)
    }

    /// When the follower pings to measure the round trip, however busy it is.
    private var sampleDue: Duration {
        role == .leading ? .seconds(Int64.max) : lastPing + samplePeriod
    }

    /// Bytes arrived from the peer.
    package mutating func inboundActivity(now: Duration) {
        guard now > lastInbound else { return }
        // A silence across a stall of this side's own is not the link's.
        if !stalledSinceArrival { recordSilence(now - lastInbound, now: now) }
        stalledSinceArrival = false
        transportLatest = nil
        lossyPath = false
        peerSending = nil
        peerHung = false
        unreadArrival = nil
        lastInbound = now
    }

    private mutating func recordSilence(_ silence: Duration, now: Duration) {
        var rolled = false
        while now - windowStart >= Self.silenceWindow {
            rolled = true
            windowStart += Self.silenceWindow
            longestSilences.append(.zero)
            if longestSilences.count > Self.silenceWindows { longestSilences.removeFirst() }
            if now - windowStart >= Self.silenceWindow * Self.silenceWindows {
                // A long quiet spell (no reads at all): start afresh from now.
                longestSilences = [.zero]
                windowStart = now
            }
        }
        guard rolled || silence > longestSilences[longestSilences.count - 1] else { return }
        longestSilences[longestSilences.count - 1] = max(longestSilences[longestSilences.count - 1], silence)
        refreshTimeout()
    }

    /// A PING arrived (its PONG is sent at once, and reported as outbound activity). Returns a
    /// PING of this side's to send with the PONG: the follower's round-trip sample, when it is
    /// due within an interval.
    package mutating func pingReceived(now: Duration) -> Probe? {
        if now > lastPingReceived { lastPingReceived = now }
        guard role == .following, !finished, now >= sampleDue - parameters.interval else { return nil }
        return ping(now: now)
    }

    /// This side stopped reading the link, or reads it again. While it does not read, nothing
    /// the peer sends can arrive, so silence proves nothing and the link is not timed out; it
    /// still pings, so the peer hears from it (and a dead path fails its writes through
    /// TCP_USER_TIMEOUT). On resuming, the timeout counts from then.
    package mutating func reading(paused: Bool, now: Duration) {
        readingPaused = paused
        if !paused, now > lastInbound { lastInbound = now }
    }

    /// This side sent a frame.
    package mutating func outboundActivity(now: Duration) {
        if now > lastOutbound { lastOutbound = now }
    }

    /// When the shell should call ``wakeUp(now:)`` next.
    package var nextWakeUp: Duration {
        let timeoutDue = readingPaused ? .seconds(Int64.max) : recheck ?? timeoutDue
        return min(timeoutDue, quietDue, sampleDue)
    }

    /// The timer fired (or any time): what to do now. `late` is how long after ``nextWakeUp``
    /// it fired. A link found silent on a wake-up later than ``lateLimit`` is not timed out at
    /// once: while this side was not running, what the peer sent waited unread, so the shell
    /// reads first and wakes again shortly (``nextWakeUp``) for the verdict, which that second
    /// wake-up gives however late it is.
    ///
    /// `transport` reads the link's transport (nil where it cannot tell); it is evaluated only
    /// once the peer is ``overdue``, so a busy or idle link costs no read.
    package mutating func wakeUp(now: Duration, late: Duration = .zero, transport: @autoclosure () -> TransportReading? = nil) -> Action {
        guard !finished else { return .wait }
        if late > lateLimit { stalledSinceArrival = true }
        if !readingPaused, now - lastInbound > overdue, let reading = transport() {
            if let latest = transportLatest {
                if reading.outOfOrderSegments != latest.outOfOrderSegments { peerSending = now - reading.sinceHeard }
                // Lost in a silence: this side had to send again, or the peer's segments came
                // beyond a gap. (Not a retransmission at any time: a tail-loss probe on a clean
                // path is one.)
                if reading.retransmittedSegments != latest.retransmittedSegments || reading.outOfOrderSegments != latest.outOfOrderSegments {
                    lossSeen = true
                }
            }
            // A segment of the peer's that ever arrived beyond a gap (since the connection
            // began: a clean path never reorders) marks the path too, even when it came before
            // this silence's first reading: at a loss's onset the peer's data, lost, is
            // retransmitted behind what followed it, and a first reading finds the count already
            // raised, with no change to see between readings before the timeout.
            if reading.recoveringLoss || reading.outOfOrderSegments > 0 { lossSeen = true }
            // Heard later than a delayed acknowledgement of the last arrival could be.
            if lossSeen, now - reading.sinceHeard > lastArrival + Self.acknowledgementDelay { lossyPath = true }
            peerHung = !lossSeen && reading.unacknowledgedSegments == 0 && peerSending == nil
            transportLatest = reading
            if let since = reading.sinceDataArrived, now - since > lastArrival {
                unreadArrival = now - since
            }
        }
        if readingPaused || now < timeoutDue {
            recheck = nil
        } else if late > lateLimit, recheck == nil {
            // One look more, once: by the recheck, the loop has read whatever was waiting, so
            // a loop that is late every time (a loaded machine) still times a dead link out.
            recheck = now + lateLimit / 10
        } else {
            finished = true
            return .timedOut
        }
        guard now >= quietDue || now >= sampleDue else { return .wait }
        return .sendPing(ping(now: now))
    }

    private mutating func ping(now: Duration) -> Probe {
        lastOutbound = now
        lastPing = now
        defer { nextNonce &+= 1 }
        return Probe(nonce: nextNonce, timestamp: UInt64(clamping: now.nanoseconds))
    }
}

/// What a peer's links showed of the path to it, handed from one link to the next: the longest
/// silence they survived in the last two minutes, and whether their transport ever showed a
/// packet lost (retransmitted, or arriving out of order).
package struct PathHistory: Equatable, Sendable {
    package var longestSilence: Duration
    package var lossSeen: Bool

    package init(longestSilence: Duration = .zero, lossSeen: Bool = false) {
        self.longestSilence = longestSilence
        self.lossSeen = lossSeen
    }
}

extension KeepaliveParameters {
    /// The pair both sides use: the shorter interval and the shorter timeout. A zero means "no
    /// opinion"; where both sides have none, the default applies.
    package func stricter(than other: KeepaliveParameters) -> KeepaliveParameters {
        func pick(_ a: Duration, _ b: Duration, _ fallback: Duration) -> Duration {
            if a <= .zero { return b <= .zero ? fallback : b }
            if b <= .zero { return a }
            return min(a, b)
        }
        let defaults = KeepaliveParameters()
        return KeepaliveParameters(
            interval: pick(interval, other.interval, defaults.interval), timeout: pick(timeout, other.timeout, defaults.timeout))
    }
}

/// What the transport (Linux's TCP) shows of a link that its byte stream does not.
package struct TransportReading: Equatable, Sendable {
    /// How many of the peer's segments have arrived out of order so far: beyond a lost one.
    package var outOfOrderSegments: UInt32
    /// How many segments this side's TCP has retransmitted so far.
    package var retransmittedSegments: UInt32
    /// How many segments this side sent that the peer's host has not acknowledged yet (nil
    /// where the transport does not tell).
    package var unacknowledgedSegments: UInt32?
    /// This side's TCP is repairing a loss now: in recovery or loss state, or retransmitting a
    /// segment after a timeout.
    package var recoveringLoss: Bool
    /// How long ago the peer's host last sent anything (any segment, an ACK as well as data).
    package var sinceHeard: Duration
    /// How long ago the peer's last data reached this side's kernel, read by this side or not
    /// (nil where the transport does not tell).
    package var sinceDataArrived: Duration?

    package init(
        outOfOrderSegments: UInt32, retransmittedSegments: UInt32, sinceHeard: Duration, sinceDataArrived: Duration? = nil,
        unacknowledgedSegments: UInt32? = nil, recoveringLoss: Bool = false
    ) {
        self.recoveringLoss = recoveringLoss
        self.outOfOrderSegments = outOfOrderSegments
        self.retransmittedSegments = retransmittedSegments
        self.unacknowledgedSegments = unacknowledgedSegments
        self.sinceHeard = sinceHeard
        self.sinceDataArrived = sinceDataArrived
    }
}
