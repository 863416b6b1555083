// SPDX-License-Identifier: Apache-2.0

package fusednorm

import (
	"errors"
	"testing"
)

// The one-byte output dtypes: descriptors take them, every size and name
// is right, and the quantized forward's queries refuse nil arguments
// before reaching the library.
func TestQuantDTypes(t *testing.T) {
	for _, c := range []struct {
		dt   DType
		name string
	}{{Float8E4M3, "float8_e4m3"}, {Float8E5M2, "float8_e5m2"}, {Int8, "int8"}} {
		if c.dt.Size() != 1 || c.dt.String() != c.name {
			t.Errorf("%v: size %d, name %q", c.dt, c.dt.Size(), c.dt.String())
		}
		td, err := NewTensor(c.dt, []int64{3, 5}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if dt, _, _, err := td.Get(); err != nil || dt != c.dt {
			t.Errorf("Get = %v, %v; want %v", dt, err, c.dt)
		}
		td.Close()
	}
	if QuantPerTensor != 0 || QuantPerToken != 1 {
		t.Errorf("scaling values %d %d", QuantPerTensor, QuantPerToken)
	}
	var h *Handle
	if _, err := h.NormFwdQuantScaleSize(nil, nil, QuantPerToken); !errors.Is(err, ErrBadParam) {
		t.Errorf("nil handle: %v", err)
	}
	if err := h.NormFwdQuant(0, nil); !errors.Is(err, ErrBadParam) {
		t.Errorf("nil arguments: %v", err)
	}
	// NormFwdQuant embeds NormFwd: its fields are NormFwd's, promoted, and
	// the call reaches the same argument checks (a nil handle here).
	a := &NormFwdQuant{NormFwd: NormFwd{X: 256, WorkspaceLen: 64}, Scaling: QuantPerToken}
	if a.X != 256 || a.WorkspaceLen != 64 || a.NormFwd.X != a.X {
		t.Errorf("promoted fields: %+v", a)
	}
	if err := h.NormFwdQuant(0, a); !errors.Is(err, ErrBadParam) {
		t.Errorf("nil handle with arguments: %v", err)
	}
}
