package routing

// Loads schedules the router's store reads, one key at a time (a server id, or another key the router chooses for
// a server's features or the profiles): at most a limit run at once and the others wait their turn (a burst of
// registrations must not take every connection of the store from the writers); a change that arrives while its
// key is being read owes another read after it (the running one may have read before the change). Each run gets a
// token, so a superseded run's result is told apart and dropped. It also knows the oldest change not applied yet
// (Oldest), which the router's readers wait for. Loads is not safe for concurrent use: the router's mailbox owns it.
type Loads struct {
	limit   int
	token   uint64
	running int
	queue   []string
	pending map[string]*pendingLoad
}

// Run is a store read to start now.
type Run struct {
	Key, ID string
	Token   uint64
	// Registration: re-read the server's registration too, not only its tools and curation.
	Registration bool
}

// pendingLoad is one key's store read: the run in flight (token, oldest: the seq of the first request it answers)
// and whether another is owed after it (again, againOldest; againRegistration).
type pendingLoad struct {
	id                string
	started           bool
	token             uint64
	oldest            uint64
	registration      bool
	again             bool
	againOldest       uint64
	againRegistration bool
}

// NewLoads runs at most limit reads at once.
func NewLoads(limit int) *Loads {
	return &Loads{limit: limit, pending: map[string]*pendingLoad{}}
}

// Request owes key (of server id) a read for the change numbered seq; it returns the run to start now, if any.
func (l *Loads) Request(key, id string, registration bool, seq uint64) []Run {
	if p, ok := l.pending[key]; ok {
		switch {
		case !p.started:
			p.registration = p.registration || registration // it has not read yet
		case !p.again:
			p.again, p.againOldest, p.againRegistration = true, seq, registration
		default:
			p.againRegistration = p.againRegistration || registration
		}
		return nil
	}
	return l.start(key, id, registration, seq)
}

func (l *Loads) start(key, id string, registration bool, oldest uint64) []Run {
	p := &pendingLoad{id: id, oldest: oldest, registration: registration}
	l.pending[key] = p
	if l.running < l.limit {
		return []Run{l.run(key, p)}
	}
	l.queue = append(l.queue, key)
	return nil
}

func (l *Loads) run(key string, p *pendingLoad) Run {
	l.token++
	l.running++
	p.token, p.started = l.token, true
	return Run{Key: key, ID: p.id, Token: p.token, Registration: p.registration}
}

// Done counts a run's result in (whatever its fate) and returns the waiting runs that may start now.
func (l *Loads) Done() []Run {
	if l.running > 0 { // a restarted router also receives the results of its previous incarnation's reads
		l.running--
	}
	var out []Run
	for l.running < l.limit && len(l.queue) > 0 {
		key := l.queue[0]
		l.queue = l.queue[1:]
		if p := l.pending[key]; p != nil && !p.started {
			out = append(out, l.run(key, p))
		}
	}
	return out
}

// Current reports whether token is key's run in flight (ok; false: a superseded run, whose result is dropped) and
// whether another read is owed after it (again).
func (l *Loads) Current(key string, token uint64) (again, ok bool) {
	p, found := l.pending[key]
	if !found || p.token != token {
		return false, false
	}
	return p.again, true
}

// Finish ends key's run (token) and returns the read owed after it, to start now, if any; ok is false when token
// is not key's run in flight.
func (l *Loads) Finish(key string, token uint64) (next []Run, ok bool) {
	p, found := l.pending[key]
	if !found || p.token != token {
		return nil, false
	}
	delete(l.pending, key)
	if p.again {
		next = l.start(key, p.id, p.againRegistration, p.againOldest)
	}
	return next, true
}

// Pending reports whether key has a read running or owed.
func (l *Loads) Pending(key string) bool {
	_, ok := l.pending[key]
	return ok
}

// Drop forgets key's reads (a removed server): the result of the one running is dropped.
func (l *Loads) Drop(key string) { delete(l.pending, key) }

// Reset forgets every read (a full load supersedes them); the count of runs on their way is kept, since their
// results still arrive.
func (l *Loads) Reset() {
	l.pending, l.queue = map[string]*pendingLoad{}, nil
}

// Oldest is the number of the oldest change whose read is not applied yet, or next when none is owed.
func (l *Loads) Oldest(next uint64) uint64 {
	for _, p := range l.pending {
		next = min(next, p.oldest)
	}
	return next
}

// OldestOf is the number of the oldest change of key whose read is not applied yet, or next when none is owed.
func (l *Loads) OldestOf(key string, next uint64) uint64 {
	if p, ok := l.pending[key]; ok {
		return min(next, p.oldest)
	}
	return next
}
