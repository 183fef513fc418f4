package throughput

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestPlacement(t *testing.T) {
	for _, c := range []struct {
		cpus       string
		prod, daem int
	}{{"", -1, -1}, {"any", -1, -1}, {"same", 0, 0}, {"split", 0, 1}} {
		if err := ValidCPUs(c.cpus); err != nil {
			t.Errorf("ValidCPUs(%q): %v", c.cpus, err)
		}
		if p, d := placement(c.cpus); p != c.prod || d != c.daem {
			t.Errorf("placement(%q) = %d, %d; want %d, %d", c.cpus, p, d, c.prod, c.daem)
		}
	}
	if err := ValidCPUs("both"); err == nil {
		t.Error(`ValidCPUs("both") accepted`)
	}
}

// pinProcess pins every thread of a running process, checked per thread in
// /proc/PID/task/*/status.
func TestPinProcessPinsEveryThread(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to see a change")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if err := pinProcess(cmd.Process.Pid, 1); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("tasks: %v %v", tasks, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + task.Name() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != "1" {
				t.Errorf("thread %s allowed on CPUs %q, want 1", task.Name(), strings.TrimSpace(v))
			}
		}
	}
}
