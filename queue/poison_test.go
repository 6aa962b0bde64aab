package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A message on an operation subject whose body is not an operation ID (a
// stray publish, a corrupt copy) never reaches the handler: it is dropped,
// and the operations after it are handled as usual.
func TestMessageThatIsNotAnOperationIDIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	for _, body := range []string{"not an id", "", strings.Repeat("a", 129), "a.b"} {
		if _, err := b.sess.Load().js.PublishMsg(ctx, &nats.Msg{Subject: OperationSubject("stray"), Data: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch(t, b, "after")
	eventually(t, 10*time.Second, "the operation after the stray messages", func() bool { return rec.count("after") == 1 })
	eventually(t, 5*time.Second, "stray messages gone from OPERATIONS", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
	if n := rec.seen(); n != 1 {
		t.Errorf("%d distinct IDs reached the handler, want only the operation's", n)
	}
}

// A handler that panics counts as a failure whose reason says so: after
// MaxFailures the dead letter tells the operator the handler panicked.
func TestHandlerPanicIsAFailureWithItsReason(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(string, int) Result { panic("nil map") }
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailures: 1})
	dispatch(t, b, "poison")
	dls := oneDeadLetter(t, b)
	if dl := dls[0]; dl.OperationID != "poison" || !strings.Contains(dl.Reason, "handler panicked: nil map") {
		t.Errorf("dead letter %+v, want the panic as its reason", dl)
	}
}
