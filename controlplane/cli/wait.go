package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// waitPoll is the server-side timeout of each WaitOperation call; the loop
// calls again until the operation is done or the context ends. The server
// answers early only when the operation is done, so this is also how often
// an intermediate state change (PENDING to RUNNING) is noticed.
const waitPoll = 2 * time.Second

func codeNameInt(c int32) string { return codeName(codes.Code(c)) }

// wait follows op until it is done, showing progress on stderr, and
// returns the finished operation. A FAILED or CANCELLED operation is
// returned with an error carrying the operation's error.
func (s *session) wait(ctx context.Context, op *cpv1.Operation) (*cpv1.Operation, error) {
	p := startProgress(s.errOut, op)
	defer p.stop()
	for !op.GetDone() {
		next, err := s.operations().WaitOperation(ctx, &cpv1.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(waitPoll)})
		if err != nil {
			if ctx.Err() == nil && status.Code(err) == codes.DeadlineExceeded {
				if _, ok := ctx.Deadline(); ok {
					// The server ran out of our own deadline (gRPC sends it
					// along) a moment before our context did.
					<-ctx.Done()
				}
			}
			if ctx.Err() != nil {
				why := "interrupted"
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					why = "--timeout reached"
				}
				return op, fmt.Errorf("stopped waiting for operation %s (%s %s, still %s): %s; resume with: magnetar operation wait %s",
					shortName(op.GetName()), op.GetType(), shortName(op.GetTarget()), op.GetState(), why, shortName(op.GetName()))
			}
			return op, err
		}
		op = next
		p.update(op)
	}
	return op, operationError(op)
}

// operationError is nil unless op ended FAILED or CANCELLED.
func operationError(op *cpv1.Operation) error {
	switch op.GetState() {
	case cpv1.Operation_FAILED, cpv1.Operation_CANCELLED:
		e := op.GetError()
		msg := "no error recorded"
		if e != nil {
			msg = codeNameInt(e.GetCode()) + ": " + e.GetMessage()
		}
		return fmt.Errorf("operation %s (%s %s) %s: %s", shortName(op.GetName()), op.GetType(), shortName(op.GetTarget()), op.GetState(), msg)
	}
	return nil
}

// progress shows an operation's progress on w. On a terminal one line is
// redrawn by a goroutine (spinner, type, target, state, elapsed) until stop;
// otherwise a line is written for every state change. The goroutine is
// owned by the progress: stop ends it and waits for it.
type progress struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu   sync.Mutex
	op   *cpv1.Operation
	last cpv1.Operation_State
	spin int

	quit chan struct{}
	wg   sync.WaitGroup
}

var spinner = []string{"|", "/", "-", "\\"}

func startProgress(w io.Writer, op *cpv1.Operation) *progress {
	p := &progress{w: w, tty: isTerminal(w), start: time.Now(), op: op, last: op.GetState(), quit: make(chan struct{})}
	if !p.tty {
		p.line(op)
		return p
	}
	p.redraw()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(120 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.redraw()
			}
		}
	}()
	return p
}

func (p *progress) elapsed() time.Duration { return time.Since(p.start).Round(time.Second) }

func (p *progress) line(op *cpv1.Operation) {
	fmt.Fprintf(p.w, "%s %s: %s (%s)\n", op.GetType(), shortName(op.GetTarget()), op.GetState(), p.elapsed())
}

func (p *progress) update(op *cpv1.Operation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.op = op
	if !p.tty && op.GetState() != p.last {
		p.line(op)
	}
	p.last = op.GetState()
}

func (p *progress) redraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spin++
	op := p.op
	mark := spinner[p.spin%len(spinner)]
	if op.GetDone() {
		mark = " "
	}
	fmt.Fprintf(p.w, "\r\033[K%s %s %s: %s (%s)", mark, op.GetType(), shortName(op.GetTarget()), op.GetState(), p.elapsed())
}

// stop ends the redraw goroutine and finishes the terminal line.
func (p *progress) stop() {
	if !p.tty {
		return
	}
	close(p.quit)
	p.wg.Wait()
	p.redraw()
	fmt.Fprintln(p.w)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
