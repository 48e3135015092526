// Package procstate reads what protoactor keeps of an actor's process but does not export: how many user messages
// wait in its mailbox and whether it has been told to stop. The console's actor view and the mailbox-depth gauge
// read them without sending the actor a message (no cost on its path). When a protoactor upgrade renames or
// retypes a field, the read says so (ok false) instead of guessing, and the actors package's TestActorsView fails.
package procstate

import (
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
)

// MailboxDepth reads how many user messages wait in an actor's mailbox. protoactor keeps the count (an atomic, the
// one its own mailbox-length gauge reads), but its process keeps the mailbox in an unexported field, and a mailbox
// middleware would not know which actor it serves: the field is read by reflection.
func MailboxDepth(p *actor.ActorProcess) (depth int, ok bool) {
	f := reflect.ValueOf(p).Elem().FieldByName("mailbox")
	if !f.IsValid() || f.Kind() != reflect.Interface {
		return 0, false
	}
	mb, ok := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(actor.Mailbox)
	if !ok || mb == nil {
		return 0, false
	}
	return mb.UserMessageCount(), true
}

// PIDDepth is MailboxDepth of the local actor pid names (ok false when it is not a local actor).
func PIDDepth(reg *actor.ProcessRegistryValue, pid *actor.PID) (depth int, ok bool) {
	proc, ok := reg.GetLocal(pid.Id)
	if !ok {
		return 0, false
	}
	if ap, ok := proc.(*actor.ActorProcess); ok {
		return MailboxDepth(ap)
	}
	return 0, false
}

// Dead reports whether the process has been told to stop (protoactor's unexported flag, read atomically; false
// when it cannot be read).
func Dead(p *actor.ActorProcess) bool {
	f := reflect.ValueOf(p).Elem().FieldByName("dead")
	if !f.IsValid() || f.Kind() != reflect.Int32 {
		return false
	}
	return atomic.LoadInt32((*int32)(unsafe.Pointer(f.UnsafeAddr()))) != 0
}
