// SPDX-License-Identifier: Apache-2.0

package fusednorm

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// object is what every handle and descriptor embeds: a lock that calls
// reading the C object hold shared, and Set / Close exclusive, so that a
// Close racing with a launch waits for it instead of freeing what C reads.
type object struct {
	mu sync.RWMutex
	id uint64 // lock order: objects are always locked by increasing id
}

var nextID atomic.Uint64

func (o *object) init() { o.id = nextID.Add(1) }

// rlock read-locks the distinct non-nil objects in id order (so that two
// calls locking overlapping sets cannot deadlock with a waiting writer) and
// returns the unlock. Callers defer the unlock, so the Go objects stay
// reachable until the C call has returned: their runtime cleanups (which
// destroy the C objects) cannot run while C still uses them.
func rlock(objs ...*object) func() {
	live := objs[:0:0]
	for _, o := range objs {
		if o != nil && !slices.Contains(live, o) {
			live = append(live, o)
		}
	}
	slices.SortFunc(live, func(a, b *object) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	for _, o := range live {
		o.mu.RLock()
	}
	return func() {
		for _, o := range live {
			o.mu.RUnlock()
		}
		runtime.KeepAlive(live)
	}
}
