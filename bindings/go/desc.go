// SPDX-License-Identifier: Apache-2.0

package fusednorm

/*
#include "shim.h"
*/
import "C"

import "runtime"

// cdesc is what every descriptor type (TensorDesc, NormDesc, BatchNormDesc,
// GroupNormDesc, LinearDesc) is made of: the C object, the lock its users
// hold, the runtime cleanup that destroys one dropped without Close, and how to name and
// destroy it. Its methods take a nil *cdesc (a nil descriptor argument).
type cdesc[P comparable] struct {
	object
	d       P
	what    string // "tensor descriptor", in errors
	closeOp string // the C destroy function, in its errors
	destroy func(P, **C.char) C.fnorm_status_t
	cleanup runtime.Cleanup
}

// openDesc creates the C object (create, named createOp) into c, which owner
// embeds; if owner is dropped unclosed, a runtime cleanup destroys it.
func openDesc[T any, P comparable](owner *T, c *cdesc[P], what, createOp string,
	create func(*P, **C.char) C.fnorm_status_t, closeOp string, destroy func(P, **C.char) C.fnorm_status_t) error {
	var d P
	var msg *C.char
	if err := check(createOp, create(&d, &msg), msg); err != nil {
		return err
	}
	c.d, c.what, c.closeOp, c.destroy = d, what, closeOp, destroy
	c.init()
	c.cleanup = runtime.AddCleanup(owner, func(d P) { destroy(d, nil) }, d)
	return nil
}

// close destroys the C object once; later calls are no-ops.
func (c *cdesc[P]) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var closed P
	if c.d == closed {
		return nil
	}
	c.cleanup.Stop()
	var msg *C.char
	err := check(c.closeOp, c.destroy(c.d, &msg), msg)
	c.d = closed
	return err
}

func (c *cdesc[P]) obj() *object {
	if c == nil {
		return nil
	}
	return &c.object
}

// ptr is the C descriptor for argument arg (lock held): nil stays NULL (the
// library decides whether the argument was optional), a closed one is an
// error.
func (c *cdesc[P]) ptr(op, arg string) (P, error) {
	var none P
	if c == nil {
		return none, nil
	}
	if c.d == none {
		return none, goError(op, StatusBadParam, "%s: %s was closed", arg, c.what)
	}
	return c.d, nil
}

// lockRead read-locks the descriptor of a getter and returns its C object
// (NULL for nil: the library's NULL_POINTER) and the unlock.
func (c *cdesc[P]) lockRead(op string) (P, func(), error) {
	unlock := rlock(c.obj())
	d, err := c.ptr(op, "desc")
	if err != nil {
		unlock()
		return d, nil, err
	}
	return d, unlock, nil
}

// lockWrite write-locks the descriptor of a setter; nil or closed is an error.
func (c *cdesc[P]) lockWrite(op string) (P, func(), error) {
	var none P
	if c == nil {
		return none, nil, goError(op, StatusBadParamNullPointer, "desc is nil")
	}
	c.mu.Lock()
	if c.d == none {
		c.mu.Unlock()
		return none, nil, goError(op, StatusBadParam, "desc was closed")
	}
	return c.d, c.mu.Unlock, nil
}

// set runs the setter op on the write-locked C object.
func (c *cdesc[P]) set(op string, call func(P, **C.char) C.fnorm_status_t) error {
	d, unlock, err := c.lockWrite(op)
	if err != nil {
		return err
	}
	defer unlock()
	var msg *C.char
	return check(op, call(d, &msg), msg)
}

// get runs the getter op on the read-locked C object.
func (c *cdesc[P]) get(op string, call func(P, **C.char) C.fnorm_status_t) error {
	d, unlock, err := c.lockRead(op)
	if err != nil {
		return err
	}
	defer unlock()
	var msg *C.char
	return check(op, call(d, &msg), msg)
}

// opened is the descriptor `d` that openDesc made, or openDesc's error.
func opened[T any](d *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

// newSet returns a new descriptor set by set (closed again if set refuses).
func newSet[T interface{ Close() error }](d T, err error, set func(T) error) (T, error) {
	var none T
	if err != nil {
		return none, err
	}
	if err := set(d); err != nil {
		d.Close()
		return none, err
	}
	return d, nil
}

// cCall and sizeCall are a C entry point with its arguments bound, run by
// callC and querySize once the call's objects are locked and its
// descriptors converted.
type cCall func(msg **C.char) C.fnorm_status_t
type sizeCall func(n *C.size_t, msg **C.char) C.fnorm_status_t

// callC is every launch's wrapper: the call's objects read-locked, bind
// converting its descriptors (the first refusal wins, and no C call is
// made), then the call, its status checked as op.
func callC(op string, locks []*object, bind func(e *argErr, op string) cCall) error {
	unlock := rlock(locks...)
	defer unlock()
	var e argErr
	call := bind(&e, op)
	if e.err != nil {
		return e.err
	}
	var msg *C.char
	return check(op, call(&msg), msg)
}

// querySize is callC for a size query: the bytes it answers.
func querySize(op string, locks []*object, bind func(e *argErr, op string) sizeCall) (uint64, error) {
	unlock := rlock(locks...)
	defer unlock()
	var e argErr
	call := bind(&e, op)
	if e.err != nil {
		return 0, e.err
	}
	var n C.size_t
	var msg *C.char
	err := check(op, call(&n, &msg), msg)
	return uint64(n), err
}

// descArg is ptr for a call's argument list, keeping the first refusal in e.
func descArg[P comparable](e *argErr, c *cdesc[P], op, arg string) P {
	p, err := c.ptr(op, arg)
	e.set(err)
	return p
}
