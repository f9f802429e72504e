package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeELF writes the smallest ELF executable debug/elf reads, with a
// PT_INTERP if dynamic, and returns its path.
func writeELF(t *testing.T, dir, name string, machine elf.Machine, dynamic bool) string {
	t.Helper()
	progs := []elf.Prog64{{Type: uint32(elf.PT_LOAD)}}
	if dynamic {
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP)})
	}
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: uint16(len(progs)), Shentsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var buf bytes.Buffer
	for _, v := range []any{h, progs} {
		if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunWritesTheSameArchiveTwiceFromTheSameBinaries(t *testing.T) {
	bins := t.TempDir()
	amd64 := writeELF(t, bins, "opkit-amd64", elf.EM_X86_64, false)
	arm64 := writeELF(t, bins, "opkit-arm64", elf.EM_AARCH64, false)
	build := func() (archive []byte, stdout string) {
		out := t.TempDir()
		var o, e bytes.Buffer
		code := run([]string{
			"-layout", filepath.Join(out, "opkit-image"), "-archive", filepath.Join(out, "opkit-image.tar"),
			"-created", "1762178709", "-revision", "abc", "-version", "v0.1.0",
			"linux/amd64=" + amd64, "linux/arm64=" + arm64,
		}, &o, &e)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e.String())
		}
		archive, err := os.ReadFile(filepath.Join(out, "opkit-image.tar"))
		if err != nil {
			t.Fatal(err)
		}
		return archive, strings.ReplaceAll(o.String(), out, "OUT")
	}
	a1, out1 := build()
	a2, out2 := build()
	if !bytes.Equal(a1, a2) {
		t.Error("two runs on the same binaries wrote different archives")
	}
	if out1 != out2 {
		t.Errorf("two runs on the same binaries report different digests:\n%s\n%s", out1, out2)
	}
	for _, want := range []string{
		`(?m)^OUT/opkit-image: OCI layout, index sha256:[0-9a-f]{64}$`,
		`(?m)^  linux/amd64 +sha256:[0-9a-f]{64}  [0-9.]+ MB compressed$`,
		`(?m)^  linux/arm64 +sha256:[0-9a-f]{64}  [0-9.]+ MB compressed$`,
		`(?m)^OUT/opkit-image.tar: oci-archive, [0-9.]+ MB, sha256:[0-9a-f]{64}$`,
	} {
		if !regexp.MustCompile(want).MatchString(out1) {
			t.Errorf("output lacks %s:\n%s", want, out1)
		}
	}
}

func TestRunRefusesADynamicBinaryNamingIt(t *testing.T) {
	dir := t.TempDir()
	bin := writeELF(t, dir, "opkit", elf.EM_X86_64, true)
	var o, e bytes.Buffer
	code := run([]string{"-layout", filepath.Join(dir, "l"), "-archive", "", "linux/amd64=" + bin}, &o, &e)
	if code != 1 || !strings.Contains(e.String(), bin+" (for linux/amd64)") || !strings.Contains(e.String(), "CGO_ENABLED=0") {
		t.Errorf("exit %d, stderr %q; want 1 naming %s and CGO_ENABLED=0", code, e.String(), bin)
	}
	if _, err := os.Stat(filepath.Join(dir, "l")); err == nil {
		t.Error("a layout was written for a binary that cannot run in it")
	}
}
