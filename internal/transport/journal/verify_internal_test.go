package journal

import (
	"math/rand/v2"
	"testing"
)

// jenkins64 is lookup3's hashlittle2 (seeds 0): the vectors of Bob
// Jenkins' own driver5.
func TestJenkinsVectors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"", 0xdeadbeefdeadbeef},
		{"Four score and seven years ago", 0x17770551ce7226e6},
	} {
		if got := jenkins64([]byte(c.in), nil, nil); got != c.want {
			t.Errorf("jenkins64(%q) = %016x, want %016x", c.in, got, c.want)
		}
		if got := jenkinsOne([]byte(c.in)); got != c.want {
			t.Errorf("jenkinsOne(%q) = %016x, want %016x", c.in, got, c.want)
		}
	}
}

// Split anywhere into three parts, the hash is the one of the whole:
// blocks that straddle parts are put together right.
func TestJenkinsAnySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 80 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		want := jenkins64(b, nil, nil)
		if got := jenkinsOne(b); got != want {
			t.Fatalf("length %d: jenkinsOne %016x, jenkins64 %016x", n, got, want)
		}
		for i := 0; i <= n; i++ {
			for j := i; j <= n; j++ {
				if got := jenkins64(b[:i], b[i:j], b[j:]); got != want {
					t.Fatalf("length %d split at %d, %d: %016x, want %016x", n, i, j, got, want)
				}
			}
		}
	}
}

// The entry our TestJournalKilled once got from journalctl without its
// MESSAGE: its cursor's hash says a field is missing, and that with the
// field it is whole.
func TestWholeTheTornEntryFromCI(t *testing.T) {
	fields := [][2]string{
		{"__CURSOR", "s=07b7fa829e254dd58e167a33724a8a2e;i=15b26;b=0123456789abcdef0123456789abcdef;m=c46e07bf0e;t=6614f6f66ef0e;x=8d8fa60c777fe17c"},
		{"__REALTIME_TIMESTAMP", "1795843659591438"}, {"__MONOTONIC_TIMESTAMP", "843659591438"},
		{"_BOOT_ID", "0123456789abcdef0123456789abcdef"},
		{"MESSAGE", "entry 88869"}, {"SEQ", "88869"}, {"PRIORITY", "6"}, {"SYSLOG_IDENTIFIER", "app"},
		{"_PID", "4242"}, {"_UID", "1000"}, {"_GID", "1000"},
	}
	entry := func(skip string) *Entry {
		e := &Entry{}
		for _, f := range fields {
			if f[0] != skip {
				e.Fields = append(e.Fields, Field{Name: []byte(f[0]), Value: []byte(f[1])})
			}
		}
		return e
	}
	if _, ok := check(entry("")); !ok {
		t.Error("the whole entry does not add up to its cursor's hash")
	}
	if _, ok := check(entry("MESSAGE")); ok {
		t.Error("the entry without MESSAGE adds up")
	}
	cut := entry("")
	cut.Truncated = true
	cut.Fields = cut.Fields[:5]
	if _, ok := check(cut); !ok {
		t.Error("an entry the decoder cut cannot be checked, and is taken as it is")
	}
}

func BenchmarkJenkins1K(b *testing.B) {
	v := make([]byte, 1024)
	b.SetBytes(int64(len(v) + 8))
	for b.Loop() {
		fieldHash([]byte("MESSAGE"), v)
	}
}

// A text field hashed in place, as the decoder's buffer holds it, and the
// same name and value apart hash alike.
func TestFieldHashInPlace(t *testing.T) {
	buf := []byte("MESSAGE=hello, world of blocks\\n")
	name, value := buf[:7], buf[8:len(buf)-2]
	if got, want := fieldHash(name, value), jenkins64([]byte("MESSAGE=hello, world of blocks"), nil, nil); got != want {
		t.Fatalf("in place %016x, want %016x", got, want)
	}
	if got, want := fieldHash([]byte("MESSAGE"), []byte("hello, world of blocks")), jenkins64(buf[:len(buf)-2], nil, nil); got != want {
		t.Fatalf("apart %016x, want %016x", got, want)
	}
}
