package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentbackplane/backplane/budget"
	"github.com/agentbackplane/backplane/internal/jsonstring"
	"github.com/agentbackplane/backplane/store"
	sqlite3 "modernc.org/sqlite/lib"
)

// A commitOp is one CommitIntent, run by the writer itself rather than as
// a closure, so that the intents of a batch share their budget arithmetic:
// the writer reads each budget's usage once per batch, checks every
// reservation against it in memory, in queue order, and writes the batch's
// sum back with one statement per budget (see tally).
type commitOp struct {
	in         store.Intent // Incarnation and Status are the store's
	approvalID string       // the approval to consume; "" for none
	res        []budget.Reservation
	existing   *store.Intent // set with ErrDuplicateKey
	seq        int64         // the intent's row, once inserted
}

// budgetKey identifies one budget_usage row.
type budgetKey struct {
	scope, key string
	per, start int64
}

func keyOf(r budget.Reservation) budgetKey {
	return budgetKey{r.Scope, r.Key, r.Window.PerSeconds(), r.Window.StartSeconds()}
}

// usage is a budget as the current transaction sees it: what was committed
// before it (base) plus what the batch's committed intents added (delta).
type usage struct {
	base, delta int64
	quota       int64 // the quota of the batch's latest reservation, if touched
	touched     bool  // some reservation of the batch was taken: write it back
	// gen is the usage row's generation (see schema version 5): the row's
	// own, or for a row not yet made, the one it will be made with. Each
	// reservation records it, so that a release after a reset gives
	// nothing back to a row made since.
	gen int64
}

// A tally holds the budgets of the intents a transaction has committed so
// far, not yet written: their usage. (The reservations themselves are in
// the intents' rows.) The transaction holds SQLite's write lock from its
// BEGIN IMMEDIATE, so usage read once stays current until COMMIT, for every
// process; flush writes the sums before anything else in the transaction
// can read or change budgets.
type tally struct {
	used    map[budgetKey]*usage
	order   []budgetKey // first use order, so writes are deterministic
	pending bool        // some reservation was added since the last flush
	// gen is budget_generation's value, read when a first usage row was
	// missing in this transaction (genRead).
	gen     int64
	genRead bool
	buf     []byte // encodeReservations' scratch
}

func newTally() *tally { return &tally{used: map[budgetKey]*usage{}} }

// dirty reports whether the tally holds writes not yet flushed.
func (t *tally) dirty() bool { return t.pending }

// reset forgets everything: at the end of each transaction, committed or
// not (the next one must read usage again).
func (t *tally) reset() {
	clear(t.used)
	t.order = t.order[:0]
	t.pending = false
	t.genRead = false
}

// get returns k's usage, reading it the first time in this transaction.
func (t *tally) get(w *wtx, k budgetKey) (*usage, error) {
	if u, ok := t.used[k]; ok {
		return u, nil
	}
	u := &usage{}
	err := w.queryRow(`SELECT used, gen FROM budget_usage WHERE scope = ? AND key = ? AND per = ? AND window_start = ?`,
		k.scope, k.key, k.per, k.start).Scan(&u.base, &u.gen)
	if errors.Is(err, sql.ErrNoRows) {
		// A row made in this transaction takes the current generation.
		if !t.genRead {
			if err := w.queryRow(`SELECT n FROM budget_generation`).Scan(&t.gen); err != nil {
				return nil, fmt.Errorf("sqlite store: read budget generation: %w", err)
			}
			t.genRead = true
		}
		u.gen, err = t.gen, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite store: read budget %s %q: %w", k.scope, k.key, err)
	}
	t.used[k] = u
	t.order = append(t.order, k)
	return u, nil
}

// check reports whether every reservation of rs fits its quota, taken in
// order on top of what the batch holds (two reservations of one budget in
// one request add up, as two statements would). It returns the first that
// does not fit, as the contract's error.
func (t *tally) check(w *wtx, rs []budget.Reservation) (*store.BudgetError, error) {
	var extra map[budgetKey]int64 // this request's own earlier reservations
	for i, r := range rs {
		k := keyOf(r)
		u, err := t.get(w, k)
		if err != nil {
			return nil, err
		}
		cur := u.base + u.delta + extra[k]
		if r.Amount > r.Quota || cur+r.Amount > r.Quota {
			return &store.BudgetError{Scope: r.Scope, Key: r.Key, Used: cur, Requested: r.Amount, Quota: r.Quota, Window: r.Window}, nil
		}
		if i < len(rs)-1 {
			if extra == nil {
				extra = map[budgetKey]int64{}
			}
			extra[k] += r.Amount
		}
	}
	return nil, nil
}

// add counts the reservations of an intent now inserted. check must have
// accepted them in this transaction, with nothing added in between.
func (t *tally) add(rs []budget.Reservation) {
	for _, r := range rs {
		u := t.used[keyOf(r)]
		u.delta += r.Amount
		u.quota = r.Quota
		u.touched = true
		t.pending = true
	}
}

// encode returns the intents.reservations value of rs (see schema version
// 5), each with its usage row's generation: nil (NULL) for none. check
// must have read the budgets of rs in this transaction (all of them, unless
// it refused rs, whose row is then undone).
func (t *tally) encode(rs []budget.Reservation) any {
	if len(rs) == 0 {
		return nil
	}
	b := append(t.buf[:0], '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendJSONString(b, r.Scope)
		b = append(b, ',')
		b = appendJSONString(b, r.Key)
		var gen int64
		if u := t.used[keyOf(r)]; u != nil {
			gen = u.gen
		} // else refused before this budget was read: the row is undone
		for _, n := range [...]int64{r.Quota, r.Amount, r.Window.PerSeconds(), r.Window.StartSeconds(), gen} {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	t.buf = b
	return string(b)
}

// appendJSONString appends s as a JSON string. Budget scopes and keys are
// names (a caller, a tool, a session id): the plain ones are copied, any
// other is escaped as encoding/json's Marshal writes it (jsonstring.HTML:
// the same bytes, without Marshal's allocation). The bytes written are
// what they were when Marshal wrote them: a plain name keeps its <, > and
// & as they are, a name with any other byte to escape has them escaped.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return jsonstring.HTML.Append(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// flush writes one usage update per budget the batch touched, then forgets
// the usage read (a write that follows in the transaction may change it).
// Any error breaks the transaction.
func (t *tally) flush(w *wtx) error {
	for _, k := range t.order {
		u := t.used[k]
		if !u.touched {
			continue
		}
		// A row that exists keeps its generation: the one read, under the
		// write lock, and recorded by the reservations.
		if _, err := w.exec(`INSERT INTO budget_usage (scope, key, per, window_start, quota, used, gen) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, key, per, window_start) DO UPDATE SET used = used + excluded.used, quota = excluded.quota`,
			k.scope, k.key, k.per, k.start, u.quota, u.delta, u.gen); err != nil {
			return fmt.Errorf("sqlite store: reserve %s %q: %w", k.scope, k.key, err)
		}
	}
	t.reset()
	return nil
}

// maxInsertRows is the most intent rows one INSERT carries (a power of
// two; 12 parameters a row stays far below SQLite's limit).
const maxInsertRows = 64

// runCommit runs one intent commit inside the writer's transaction. It
// returns the request's own error (nothing of it is written) and, apart,
// an error that broke the transaction.
//
// The common case, no approval to consume and the budget checked in memory
// as fitting, is one INSERT, which SQLite undoes alone if it fails: no
// savepoint. A request the budget refuses, or one consuming an approval,
// runs inside a savepoint, so that the checks come in the order the
// contract gives (call id, idempotency key, budget, approval) and a late
// refusal undoes the intent row.
func (s *Store) runCommit(w *wtx, op *commitOp, t *tally) (reqErr, txErr error) {
	refused, err := t.check(w, op.res)
	if err != nil {
		return nil, err
	}
	if refused == nil && op.approvalID == "" {
		if err := s.insertIntent(w, op, t); err != nil {
			if c := sqliteCode(err); c != 0 && c != sqlite3.SQLITE_CONSTRAINT {
				// Errors other than a constraint's (I/O, full disk) may
				// have rolled the whole transaction back.
				return nil, fmt.Errorf("sqlite store: %w", err)
			}
			return err, nil
		}
		t.add(op.res)
		return nil, nil
	}
	if err := w.execErr(`SAVEPOINT req`); err != nil {
		return nil, fmt.Errorf("sqlite store: savepoint: %w", err)
	}
	reqErr = s.insertIntent(w, op, t)
	if reqErr == nil && refused != nil {
		reqErr = refused
	}
	if reqErr == nil && op.approvalID != "" {
		reqErr = consumeApproval(w, op)
	}
	if reqErr != nil {
		if err := w.execErr(`ROLLBACK TO req`); err != nil {
			// The transaction itself is gone (an I/O error rolls it
			// back): nothing of this batch is written.
			return nil, fmt.Errorf("sqlite store: %w (rolling back after: %v)", err, reqErr)
		}
	}
	if err := w.execErr(`RELEASE req`); err != nil {
		return nil, fmt.Errorf("sqlite store: release savepoint: %w", err)
	}
	if reqErr == nil {
		t.add(op.res)
	}
	return reqErr, nil
}

// insertIntent inserts op's intent row, with its reservations (t has read
// their budgets). Inserting first detects a repeated call id or
// idempotency key with the unique indexes, at no extra cost when there is
// none.
func (s *Store) insertIntent(w *wtx, op *commitOp, t *tally) error {
	in := &op.in
	op.existing, op.seq = nil, 0
	res, err := w.exec(`INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
		args_digest, idempotency_key, approval_id, incarnation, created_at, reservations, client, protocol_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		in.CallID, in.Caller, in.Session, in.Tool, in.DefinitionHash, blob(in.Arguments),
		in.ArgsDigest, nullString(in.IdempotencyKey), nullString(in.ApprovalID), s.incarnation, nanos(in.CreatedAt),
		t.encode(op.res), nullString(in.ClientInfo), nullString(in.ProtocolVersion))
	if err == nil {
		op.seq, err = res.LastInsertId()
		return err
	}
	if isUnique(err) && in.IdempotencyKey != "" && !strings.Contains(err.Error(), "intents.call_id") {
		prev, gerr := scanIntent(w.queryRow(`SELECT `+intentCols+intentFrom+` WHERE i.caller = ? AND i.idempotency_key = ?`,
			in.Caller, in.IdempotencyKey))
		if gerr != nil {
			return fmt.Errorf("sqlite store: read intent of idempotency key %q: %w", in.IdempotencyKey, gerr)
		}
		op.existing = prev
		return fmt.Errorf("idempotency key %q of %s: %w", in.IdempotencyKey, in.Caller, store.ErrDuplicateKey)
	}
	if isUnique(err) {
		return fmt.Errorf("sqlite store: call id %q already committed: %w", in.CallID, err)
	}
	return fmt.Errorf("sqlite store: commit intent %s: %w", in.CallID, err)
}

// consumeApproval marks op's approval consumed by op's call, if it is
// approved, unconsumed, unexpired and for exactly this call.
func consumeApproval(w *wtx, op *commitOp) error {
	in := &op.in
	n, err := w.affected(`UPDATE approvals SET consumed_by = ?
		WHERE id = ? AND status = 'approved' AND consumed_by IS NULL AND expires_at > ?
		AND caller = ? AND tool = ? AND definition_hash = ? AND args_digest = ?`,
		in.CallID, op.approvalID, cmpNanos(in.CreatedAt), in.Caller, in.Tool, in.DefinitionHash, in.ArgsDigest)
	if err != nil {
		return fmt.Errorf("sqlite store: consume approval %s: %w", op.approvalID, err)
	}
	if n != 1 {
		return fmt.Errorf("approval %s for call %s: %w", op.approvalID, in.CallID, store.ErrApprovalUnavailable)
	}
	return nil
}

// A settleOp is a settlement that gives no budget back (succeeded or
// uncertain): a run of them in one transaction is one UPDATE (see
// settleGroup). The request's fn settles it alone, the fallback.
type settleOp struct {
	callID string
	st     store.Settlement
}

// maxSettleRows is the most settlements one statement carries.
const maxSettleRows = 64

// closeOpenQuery deletes the open_intents rows of n intents of one
// incarnation (the last parameter): how settleGroup checks that each is
// still started by this incarnation, the condition Settle's own has.
func closeOpenQuery(n int) string {
	var b strings.Builder
	b.WriteString(`DELETE FROM open_intents WHERE seq IN (`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
	}
	b.WriteString(`) AND incarnation = ?`)
	return b.String()
}

// insertSettlementsQuery appends n settlement rows.
func insertSettlementsQuery(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO settlements (seq, status, result, error_class, error_message, settled_at, error_detail) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?)`)
	}
	return b.String()
}

// settleRun returns how many requests from the start of rs settle as one
// group: settleOps with distinct call ids (a repeated one must see the
// first's outcome, as in sequence) of intents this Store committed (their
// seq known to the writer), at most maxSettleRows.
func (w *wtx) settleRun(rs []*writeReq) int {
	n := 0
	for n < len(rs) && n < maxSettleRows && rs[n].settle != nil {
		if _, ok := w.open[rs[n].settle.callID]; !ok {
			return n
		}
		id := rs[n].settle.callID
		for _, r := range rs[:n] {
			if r.settle.callID == id {
				return n
			}
		}
		n++
	}
	return n
}

// settleGroup settles rs, each a settleOp of a distinct call id whose seq
// the writer knows, with two statements inside a savepoint: the intents'
// open rows deleted (all of them must be this incarnation's), their
// settlement rows appended. It reports whether every one of them was
// settled; if not (some intent was not started by this incarnation), it
// has undone the group, and the caller settles them one by one to tell
// each its own outcome. An error breaks the transaction.
func (s *Store) settleGroup(w *wtx, rs []*writeReq) (bool, error) {
	if err := w.execErr(`SAVEPOINT settle`); err != nil {
		return false, fmt.Errorf("sqlite store: savepoint: %w", err)
	}
	seqs := make([]int64, len(rs))
	args := make([]any, 0, 7*len(rs))
	for i, r := range rs {
		seqs[i] = w.open[r.settle.callID]
		args = append(args, seqs[i])
	}
	args = append(args, s.incarnation)
	n, err := w.affected(w.multiRow(closeOpenKind, len(rs)), args...)
	if err != nil {
		return false, fmt.Errorf("sqlite store: settle: %w", err)
	}
	ok := n == int64(len(rs))
	if ok {
		args = args[:0]
		for i, r := range rs {
			op := r.settle
			args = append(args, seqs[i], string(op.st.Status), blob(op.st.Result), op.st.ErrorClass, op.st.ErrorMessage, nanos(op.st.At), blob(op.st.ErrorDetail))
		}
		if _, err := w.exec(w.multiRow(insertSettlementsKind, len(rs)), args...); err != nil {
			return false, fmt.Errorf("sqlite store: settle: %w", err)
		}
		for _, r := range rs {
			delete(w.open, r.settle.callID)
		}
	} else if err := w.execErr(`ROLLBACK TO settle`); err != nil {
		return false, fmt.Errorf("sqlite store: settle: %w", err)
	}
	if err := w.execErr(`RELEASE settle`); err != nil {
		return false, fmt.Errorf("sqlite store: release savepoint: %w", err)
	}
	return ok, nil
}

// intentRowArgs is how many parameters one intent row of an INSERT takes.
const intentRowArgs = 14

// insertIntentsQuery is the INSERT of n intent rows that skips, rather than
// fails on, a row whose call id or idempotency key is taken: the rows
// inserted are counted, and a group with a skipped row is run again one by
// one (see commitGroup).
func insertIntentsQuery(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO intents (call_id, caller, session, tool, definition_hash, arguments,
		args_digest, idempotency_key, approval_id, incarnation, created_at, reservations, client, protocol_version) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	}
	b.WriteString(` ON CONFLICT DO NOTHING`)
	return b.String()
}

// commitGroup commits, with a few multi-row INSERTs inside one savepoint,
// the longest run at the start of rs of intent commits that consume no
// approval and whose budget fits (checked in memory, in order, each on top
// of the ones before). It returns how many requests it took and whether
// they all committed; if some row was skipped (a call id or idempotency key
// taken, by the database or by an earlier request of the run), it has
// undone the group and its budget, and the caller runs them one by one, so
// that each is told its own outcome. A run shorter than two is left to the
// caller (taken 0). An error breaks the transaction.
func (s *Store) commitGroup(w *wtx, rs []*writeReq, t *tally) (taken int, ok bool, err error) {
	snap := t.snapshot()
	for taken < len(rs) && taken < maxInsertRows {
		op := rs[taken].commit
		if op == nil || op.approvalID != "" {
			break
		}
		refused, err := t.check(w, op.res)
		if err != nil {
			return 0, false, err
		}
		if refused != nil {
			break
		}
		t.add(op.res)
		taken++
	}
	if taken < 2 {
		t.restore(snap)
		return 0, false, nil
	}
	if err := w.execErr(`SAVEPOINT commits`); err != nil {
		return 0, false, fmt.Errorf("sqlite store: savepoint: %w", err)
	}
	var inserted int64
	group := rs[:taken]
	for len(group) > 0 {
		n := maxInsertRows
		for n > len(group) {
			n /= 2
		}
		args := make([]any, 0, intentRowArgs*n)
		for _, r := range group[:n] {
			in := &r.commit.in
			args = append(args, in.CallID, in.Caller, in.Session, in.Tool, in.DefinitionHash, blob(in.Arguments),
				in.ArgsDigest, nullString(in.IdempotencyKey), nullString(in.ApprovalID), s.incarnation, nanos(in.CreatedAt),
				t.encode(r.commit.res), nullString(in.ClientInfo), nullString(in.ProtocolVersion))
		}
		res, err := w.exec(w.multiRow(insertIntentsKind, n), args...)
		var k, last int64
		if err == nil {
			if k, err = res.RowsAffected(); err == nil {
				last, err = res.LastInsertId()
			}
		}
		if err != nil {
			// A constraint other than uniqueness (which the statement
			// skips) fails the whole statement: run them alone.
			if sqliteCode(err) != sqlite3.SQLITE_CONSTRAINT {
				return 0, false, fmt.Errorf("sqlite store: commit intents: %w", err)
			}
			break
		}
		if k == int64(n) {
			// Every row inserted: SQLite gave them the rowids after the
			// largest, one by one, so the last is the statement's.
			for i, r := range group[:n] {
				r.commit.seq = last - int64(n-1-i)
			}
		}
		inserted += k
		group = group[n:]
	}
	if inserted != int64(taken) {
		if err := w.execErr(`ROLLBACK TO commits`); err != nil {
			return 0, false, fmt.Errorf("sqlite store: commit intents: %w", err)
		}
		t.restore(snap)
	}
	if err := w.execErr(`RELEASE commits`); err != nil {
		return 0, false, fmt.Errorf("sqlite store: release savepoint: %w", err)
	}
	return taken, inserted == int64(taken), nil
}

// A tallySnapshot is what restore needs to undo the adds made after it.
type tallySnapshot struct {
	pending bool
	keys    int
	used    []usage // the values of the first keys entries of order
}

func (t *tally) snapshot() tallySnapshot {
	sn := tallySnapshot{pending: t.pending, keys: len(t.order), used: make([]usage, len(t.order))}
	for i, k := range t.order {
		sn.used[i] = *t.used[k]
	}
	return sn
}

// restore undoes the adds since sn. Usage read since stays (it is what
// the database holds).
func (t *tally) restore(sn tallySnapshot) {
	t.pending = sn.pending
	for i, k := range t.order {
		u := t.used[k]
		if i < sn.keys {
			*u = sn.used[i]
		} else {
			u.delta, u.quota, u.touched = 0, 0, false
		}
	}
}

// multiRowKind is a statement of several rows: which one.
type multiRowKind int

const (
	insertIntentsKind multiRowKind = iota
	closeOpenKind
	insertSettlementsKind
)

// multiRowKey names one statement of n rows.
type multiRowKey struct {
	kind multiRowKind
	n    int
}

// multiRow returns the statement of kind for n rows, built once per writer
// (each Store has its own, so Stores in one process share nothing).
func (w *wtx) multiRow(kind multiRowKind, n int) string {
	k := multiRowKey{kind, n}
	q, ok := w.queries[k]
	if !ok {
		switch kind {
		case insertIntentsKind:
			q = insertIntentsQuery(n)
		case closeOpenKind:
			q = closeOpenQuery(n)
		default:
			q = insertSettlementsQuery(n)
		}
		w.queries[k] = q
	}
	return q
}
