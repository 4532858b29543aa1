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
/// The silence that kills a link is judged against the silences this path has shown
/// (``timeout``), as a phi-accrual failure detector judges a heartbeat's (Hayashibara et al.):
/// a silence is suspect by how improbable the path's own arrivals make it. A link in good health
/// is silent for about an interval; silences of more than two intervals (``stallThreshold``) are
/// stalls, a lossy path's TCP retransmitting. Each failed retransmission adds about one
/// retransmission timeout to a stall and each succeeds with about the same chance, so how far a
/// stall runs beyond the threshold falls off exponentially, and its scale (``tailScale``) is the
/// mean of how far the path's stalls of the last two minutes ran beyond it. The link is timed
/// out when the silence is one that fewer than one stall in 10^``suspicionThreshold`` would
/// reach: at the threshold plus `suspicionThreshold * ln 10` scales, never more than the stall
/// limit, and never less than the configured timeout on a path that has never lost a packet or
/// ``ceiling`` on one that has (where a silence of seconds is what TCP's repairs look like).
/// Until the path shows stalls, a prior of ``priorStalls`` stalls holds, whose scale gives that
/// least timeout; so a clean path is timed out as configured, and one stall moves the timeout
/// only part of the way. Only silences that ended in an arrival count, for
/// stalls and for loss: a silence that ended in a teardown is no evidence of a lossy path. What a peer's earlier links showed of its path (``PathHistory``: the stalls they
/// survived, whether their transport ever showed a packet lost) starts its next link off, so a
/// link replacing one on a lossy path is not torn down by the stall it was replaced after, while
/// on a clean path a second fault is found as fast as the first.
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
///   on it: the link is kept at least until ``ceiling`` after the last arrival (which
///   ``timeout`` already is once a loss is the path's: this is for a loss seen in this silence
///   alone, at its onset). (A black hole is heard from no more; a clean path loses nothing in
///   its silences.)
/// - when the peer's host acknowledges everything this side sent (nothing unacknowledged, nothing
///   retransmitted since the silence began) and sends no segment of its own, on a path that has
///   never shown a packet lost, its application is hung (a frozen process): the link is timed
///   out at the configured timeout, whatever the silences of the link made ``timeout``
///   (``peerHung``). (On a lossy path a peer in loss recovery, its window down to a segment,
///   acknowledges and sends nothing new in just the same way.)
/// A dead path sends nothing, so it is timed out at ``timeout``; a frozen peer at the configured
/// timeout; a frozen peer whose kernel still acknowledges over a lossy path, at ``timeout`` or
/// the ceiling, whichever is later.
///
/// And the peer's data that reached this side's kernel and is not read yet is no silence of the
/// peer's: the silence counts from the latest arrival the transport shows. (This side's event
/// loop busy with its own writes, its reads waiting, is this side's stall, not the link's.)
package struct KeepaliveStateMachine: Sendable {
    /// ``ceiling`` as a multiple of the configured timeout.
    package static let ceilingFactor = 3
    /// How long a silence the transport shows to be a lossy path's stall may last, as a
    /// multiple of the configured timeout.
    package static let stallFactor = 10
    /// Longer than the peer's host may delay its acknowledgement of the last arrival (Linux: at
    /// most 200 ms): heard from after that, the host is on the path.
    static let acknowledgementDelay = Duration.milliseconds(250)
    /// How long a stall counts towards the timeout: 12 windows of 10 s.
    static let silenceWindow = Duration.seconds(10)
    static let silenceWindows = 12
    /// How improbable a silence must be to time the link out, as a power of ten: one that fewer
    /// than one stall in 1,000 of this path's would reach.
    package static let suspicionThreshold = 3.0
    /// How many stalls the prior counts as: the path's own take over once it has shown a few.
    package static let priorStalls = 2
    private static let ln10 = 2.302_585_092_994_046

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
    /// How long a silence the transport shows to be a loss under repair, with the peer's host
    /// still heard, is kept at least, and the timeout on a path that has lost packets before it
    /// shows stalls: ``ceilingFactor`` times the configured timeout.
    package let ceiling: Duration
    /// The longest silence ever kept: the most ``timeout`` can be, and the most a silence the
    /// transport shows the peer sending through is kept. ``stallFactor`` times the configured
    /// timeout.
    package let stallLimit: Duration
    /// A silence longer than this is a stall (two intervals: a link in good health is silent
    /// for about one).
    package let stallThreshold: Duration
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
    /// Where the verdict on the link stands.
    private enum Verdict {
        /// Alive, as far as this side knows.
        case alive
        /// Found silent past its timeout on a late wake-up: one look more at this time, once.
        case recheck(at: Duration)
        /// Timed out: the machine is done.
        case timedOut
    }

    private var verdict = Verdict.alive
    /// This side stopped reading (its application is behind): silence is then its own doing.
    package private(set) var readingPaused = false
    /// The stalls of each of the last windows, the newest last.
    private var stallWindows: [StallTally]
    private var windowStart: Duration

    /// What the silence under way has shown: all of it goes when the silence ends in an
    /// arrival (``inboundActivity(now:late:)``).
    private struct Silence {
        /// This side woke up late in it: it says nothing about the link.
        var stalled = false
        /// The transport as last read in it.
        var transportLatest: TransportReading?
        /// It showed packets lost with the peer's host still answering.
        var lossyPath = false
        /// When the peer was last seen sending in it (its segments arriving out of order).
        var peerSending: Duration?
        /// The transport's latest reading in it shows the peer's host acknowledging all this
        /// side sent, nothing retransmitted and nothing of its own sent, on a path that never
        /// lost a packet: its application is hung.
        var peerHung = false
        /// It showed a packet lost (this side retransmitting; a black hole shows it as much as a
        /// lossy path): the path's once the silence ends in an arrival.
        var lost = false
        /// When the peer's latest data reached this side's kernel, where that is after the last
        /// arrival read: the data waits unread.
        var unreadArrival: Duration?
    }

    private var silence = Silence()

    /// The transport's latest reading in the silence under way shows the peer's application
    /// hung (``Silence/peerHung``).
    package var peerHung: Bool { silence.peerHung }
    /// When the transport of this link, or of the peer's earlier links, last showed a packet
    /// lost: a segment of the peer's out of order, or a loss in a silence that ended in an
    /// arrival. Forgotten two minutes later, as the stalls are.
    private var lossSeenAt: Duration?
    private var lossSeen: Bool { lossSeenAt != nil }
    /// The peer's segments out of order the transport had shown when loss was last marked for them.
    private var outOfOrderCounted: UInt32 = 0
    /// The latest `now` this machine was given: what ``history`` is as of.
    private var latestNow: Duration

    /// - Parameter path: What the peer's earlier links showed of the path (``history``).
    package init(
        parameters: KeepaliveParameters,
        role: Role = .leading,
        now: Duration,
        path: PathHistory = PathHistory()
    ) {
        self.parameters = parameters
        self.role = role
        // Worked out once: Duration's arithmetic is 128-bit, and wake-ups are many.
        self.ceiling = parameters.timeout * Self.ceilingFactor
        self.stallLimit = parameters.timeout * Self.stallFactor
        self.lateLimit = parameters.interval / 5
        self.overdue = parameters.interval + lateLimit
        self.leaderOverdue = parameters.interval * 3 / 2
        self.samplePeriod = parameters.interval * 8
        self.stallThreshold = parameters.interval * 2
        self.lastInbound = now
        self.lastOutbound = now
        self.lastPing = now
        self.lastPingReceived = now
        self.latestNow = now
        // The earlier links' windows, where they fall in time: those older than two minutes
        // go as the windows roll, and so does a loss seen that long ago.
        self.windowStart = now - path.newestWindowAge
        self.stallWindows = path.windows.isEmpty ? [StallTally()] : path.windows
        self.lossSeenAt = path.lossSeenAge.map { now - $0 }
        self.timeout = parameters.timeout
        _ = roll(now: now)
        refreshTimeout()
    }

    /// The stalls of the last two minutes that ended in an arrival (with what the peer's earlier
    /// links showed).
    package var recentStalls: StallTally { stallWindows.reduce(StallTally(), +) }

    /// What this link showed of its path, for the peer's next link, as of `now`: the stalls it
    /// survived in each window of the last two minutes (never the silence it may be ending
    /// with), and when a packet was last lost.
    package func history(now: Duration) -> PathHistory {
        PathHistory(windows: stallWindows, newestWindowAge: now - windowStart, lossSeenAge: lossSeenAt.map { now - $0 })
    }

    /// ``history(now:)`` as of the latest event the machine was given.
    package var history: PathHistory { history(now: latestNow) }

    /// The timeout before the path has shown stalls, and the least it is after: the configured
    /// one, or ``ceiling`` on a path that has lost packets.
    private var priorTimeout: Duration { lossSeen ? ceiling : parameters.timeout }

    /// The prior's scale: the one that makes ``timeout`` ``priorTimeout``.
    private var priorScale: Double {
        max(0, (priorTimeout - stallThreshold).seconds) / (Self.suspicionThreshold * Self.ln10)
    }

    /// How far beyond ``stallThreshold`` this path's stalls run, in seconds: the mean excess of
    /// the recent stalls and the prior's.
    package var tailScale: Double {
        let stalls = recentStalls
        return (stalls.excess.seconds + Double(Self.priorStalls) * priorScale) / Double(stalls.count + Self.priorStalls)
    }

    /// How improbable a silence this long is on this path, as phi: minus the decimal logarithm of
    /// the chance that a stall runs at least this long (zero up to ``stallThreshold``).
    package func suspicion(of silence: Duration) -> Double {
        let beyond = (silence - stallThreshold).seconds
        guard beyond > 0 else { return 0 }
        let scale = tailScale
        return scale > 0 ? beyond / scale / Self.ln10 : .infinity
    }

    /// What the transport showed at the latest reading of the silence under way (nil before
    /// the peer was overdue, or where it cannot tell): for the report of a timeout.
    package var transportInSilence: TransportReading? { silence.transportLatest }

    /// Whether this link, or the peer's earlier links, showed a packet lost, the silence under
    /// way included.
    package var hasSeenLoss: Bool { lossSeen || silence.lost }

    /// How long the peer has been silent now.
    package func silence(now: Duration) -> Duration { max(.zero, now - lastInbound) }

    /// The silence after which the link is dead now: the one whose ``suspicion(of:)`` reaches
    /// ``suspicionThreshold``, at least the configured timeout (``ceiling`` on a path that has
    /// lost packets) and at most the stall limit. (Kept as the stalls change, not worked out at
    /// every wake-up.)
    package private(set) var timeout: Duration

    private mutating func refreshTimeout() {
        // No stall, nothing to judge by: the prior's timeout (which its scale gives, unless it
        // is shorter than two intervals).
        guard recentStalls.count > 0 else {
            timeout = priorTimeout
            return
        }
        let judged = stallThreshold + .seconds(Self.suspicionThreshold * Self.ln10 * tailScale)
        timeout = min(max(judged, priorTimeout), stallLimit)
    }

    /// The peer's last arrival: read, or waiting in this side's kernel to be.
    private var lastArrival: Duration { max(lastInbound, silence.unreadArrival ?? lastInbound) }

    /// When the silence under way times the link out: ``timeout`` after the last arrival, or
    /// later as the transport shows (see the type's description).
    private var timeoutDue: Duration {
        if silence.peerHung { return lastArrival + parameters.timeout }
        var due = lastArrival + (silence.lossyPath ? max(ceiling, timeout) : timeout)
        if let peerSending = silence.peerSending {
            due = min(max(due, peerSending + ceiling), lastInbound + stallLimit)
        }
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
    ///
    /// `late` is how long after ``nextWakeUp`` the arrival is read, if that wake-up has not come
    /// yet: past ``lateLimit`` this side was not running (stopped, or its machine asleep), and on
    /// resuming its loop read what waited before its overdue timer fired. The silence is then
    /// its own, as one across a late wake-up is.
    package mutating func inboundActivity(now: Duration, late: Duration = .zero) {
        latestNow = max(latestNow, now)
        guard now > lastInbound else { return }
        if late > lateLimit { silence.stalled = true }
        // A silence across a stall of this side's own is not the link's.
        if !silence.stalled { recordSilence(now - lastInbound, now: now) }
        if silence.lost { markLossSeen(now: now) }
        silence = Silence()
        lastInbound = now
    }

    /// Moves the windows on to `now`: those older than two minutes go, and a loss seen that
    /// long ago is forgotten. Returns whether anything changed.
    private mutating func roll(now: Duration) -> Bool {
        var rolled = false
        while now - windowStart >= Self.silenceWindow {
            rolled = true
            windowStart += Self.silenceWindow
            stallWindows.append(StallTally())
            if stallWindows.count > Self.silenceWindows { stallWindows.removeFirst() }
            if now - windowStart >= Self.silenceWindow * Self.silenceWindows {
                // A long quiet spell (no reads at all): start afresh from now.
                stallWindows = [StallTally()]
                windowStart = now
            }
        }
        if let seen = lossSeenAt, now - seen >= Self.silenceWindow * Self.silenceWindows {
            lossSeenAt = nil
            rolled = true
        }
        return rolled
    }

    private mutating func recordSilence(_ silence: Duration, now: Duration) {
        let rolled = roll(now: now)
        if silence > stallThreshold {
            stallWindows[stallWindows.count - 1].add(stallOf: silence - stallThreshold)
        } else if !rolled {
            return
        }
        refreshTimeout()
    }

    /// A PING arrived (its PONG is sent at once, and reported as outbound activity). Returns a
    /// PING of this side's to send with the PONG: the follower's round-trip sample, when it is
    /// due within an interval.
    package mutating func pingReceived(now: Duration) -> Probe? {
        latestNow = max(latestNow, now)
        if now > lastPingReceived { lastPingReceived = now }
        guard role == .following, !isTimedOut, now >= sampleDue - parameters.interval else { return nil }
        return ping(now: now)
    }

    /// This side stopped reading the link, or reads it again. While it does not read, nothing
    /// the peer sends can arrive, so silence proves nothing and the link is not timed out; it
    /// still pings, so the peer hears from it (and a dead path fails its writes through
    /// TCP_USER_TIMEOUT). On resuming, the timeout counts from then.
    package mutating func reading(paused: Bool, now: Duration) {
        latestNow = max(latestNow, now)
        readingPaused = paused
        if !paused, now > lastInbound { lastInbound = now }
    }

    /// This side sent a frame.
    package mutating func outboundActivity(now: Duration) {
        latestNow = max(latestNow, now)
        if now > lastOutbound { lastOutbound = now }
    }

    private var isTimedOut: Bool {
        if case .timedOut = verdict { true } else { false }
    }

    /// When the shell should call ``wakeUp(now:)`` next.
    package var nextWakeUp: Duration {
        let timeoutDue: Duration =
            switch verdict {
            case _ where readingPaused: .seconds(Int64.max)
            case .recheck(let at): at
            case .alive, .timedOut: timeoutDue
            }
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
    package mutating func wakeUp(
        now: Duration,
        late: Duration = .zero,
        transport: @autoclosure () -> TransportReading? = nil
    ) -> Action {
        latestNow = max(latestNow, now)
        guard !isTimedOut else { return .wait }
        if late > lateLimit { silence.stalled = true }
        if !readingPaused, now - lastInbound > overdue, let reading = transport() {
            if let latest = silence.transportLatest {
                if reading.outOfOrderSegments != latest.outOfOrderSegments {
                    silence.peerSending = now - reading.sinceHeard
                }
                // Lost in a silence: this side had to send again, or the peer's segments came
                // beyond a gap. (Not a retransmission at any time: a tail-loss probe on a clean
                // path is one.)
                if reading.retransmittedSegments != latest.retransmittedSegments
                    || reading.outOfOrderSegments != latest.outOfOrderSegments
                {
                    silence.lost = true
                }
            }
            // A segment of the peer's that ever arrived beyond a gap (since the connection
            // began: a clean path never reorders) marks the path too, even when it came before
            // this silence's first reading: at a loss's onset the peer's data, lost, is
            // retransmitted behind what followed it, and a first reading finds the count already
            // raised, with no change to see between readings before the timeout.
            // (Not a black hole's: its peer's segments stop, they do not come out of order.)
            // Each segment counts once: a count raised long ago is no loss now (the loss seen
            // is forgotten two minutes on).
            if reading.outOfOrderSegments > outOfOrderCounted {
                outOfOrderCounted = reading.outOfOrderSegments
                markLossSeen(now: now)
            }
            if reading.recoveringLoss { silence.lost = true }
            // Heard later than a delayed acknowledgement of the last arrival could be.
            if hasSeenLoss, now - reading.sinceHeard > lastArrival + Self.acknowledgementDelay {
                silence.lossyPath = true
            }
            silence.peerHung = !hasSeenLoss && reading.unacknowledgedSegments == 0 && silence.peerSending == nil
            silence.transportLatest = reading
            if let since = reading.sinceDataArrived, now - since > lastArrival {
                silence.unreadArrival = now - since
            }
        }
        switch verdict {
        case _ where readingPaused || now < timeoutDue:
            verdict = .alive
        case .alive where late > lateLimit:
            // One look more, once: by the recheck, the loop has read whatever was waiting, so
            // a loop that is late every time (a loaded machine) still times a dead link out.
            verdict = .recheck(at: now + lateLimit / 10)
        case .alive, .recheck, .timedOut:
            verdict = .timedOut
            return .timedOut
        }
        guard now >= quietDue || now >= sampleDue else { return .wait }
        return .sendPing(ping(now: now))
    }

    private mutating func markLossSeen(now: Duration) {
        let first = !lossSeen
        lossSeenAt = max(lossSeenAt ?? now, now)
        if first { refreshTimeout() }
    }

    private mutating func ping(now: Duration) -> Probe {
        lastOutbound = now
        lastPing = now
        defer { nextNonce &+= 1 }
        return Probe(nonce: nextNonce, timestamp: UInt64(clamping: now.nanoseconds))
    }
}

/// What a peer's links showed of the path to it, handed from one link to the next: the stalls
/// they survived in each 10-second window of the last two minutes, and when their transport last
/// showed a packet lost (retransmitted, or arriving out of order). Its times are ages, so a
/// history kept for a while (``aged(by:)``) tells the next link how old each piece is: nothing
/// older than two minutes counts, however often the links are replaced.
package struct PathHistory: Equatable, Sendable {
    /// Stalls by window, the oldest first.
    package var windows: [StallTally]
    /// How long before the history was taken its newest window began.
    package var newestWindowAge: Duration
    /// How long before the history was taken a packet was last lost; nil: not in two minutes.
    package var lossSeenAge: Duration?

    package init(windows: [StallTally], newestWindowAge: Duration, lossSeenAge: Duration?) {
        self.windows = windows
        self.newestWindowAge = newestWindowAge
        self.lossSeenAge = lossSeenAge
    }

    /// A history of `stalls` just now, and a packet just lost if `lossSeen`.
    package init(stalls: StallTally = StallTally(), lossSeen: Bool = false) {
        self.init(windows: [stalls], newestWindowAge: .zero, lossSeenAge: lossSeen ? .zero : nil)
    }

    /// Every stall of the history.
    package var stalls: StallTally { windows.reduce(StallTally(), +) }
    package var lossSeen: Bool { lossSeenAge != nil }

    /// The same history, `elapsed` later.
    package func aged(by elapsed: Duration) -> PathHistory {
        PathHistory(
            windows: windows,
            newestWindowAge: newestWindowAge + elapsed,
            lossSeenAge: lossSeenAge.map { $0 + elapsed }
        )
    }

    /// The same evidence: as many stalls, as long in all, and a loss seen or not.
    package static func == (lhs: PathHistory, rhs: PathHistory) -> Bool {
        lhs.stalls == rhs.stalls && lhs.lossSeen == rhs.lossSeen
    }
}

/// Stalls a path showed: how many, and how far beyond the stall threshold they ran in all.
package struct StallTally: Equatable, Sendable {
    package var count: Int
    package var excess: Duration

    package init(count: Int = 0, excess: Duration = .zero) {
        self.count = count
        self.excess = excess
    }

    /// Counts a stall that ran `excess` beyond the threshold.
    package mutating func add(stallOf excess: Duration) {
        count += 1
        self.excess += excess
    }

    package static func + (left: StallTally, right: StallTally) -> StallTally {
        StallTally(count: left.count + right.count, excess: left.excess + right.excess)
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
            interval: pick(interval, other.interval, defaults.interval),
            timeout: pick(timeout, other.timeout, defaults.timeout)
        )
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
        outOfOrderSegments: UInt32,
        retransmittedSegments: UInt32,
        sinceHeard: Duration,
        sinceDataArrived: Duration? = nil,
        unacknowledgedSegments: UInt32? = nil,
        recoveringLoss: Bool = false
    ) {
        self.recoveringLoss = recoveringLoss
        self.outOfOrderSegments = outOfOrderSegments
        self.retransmittedSegments = retransmittedSegments
        self.unacknowledgedSegments = unacknowledgedSegments
        self.sinceHeard = sinceHeard
        self.sinceDataArrived = sinceDataArrived
    }
}
