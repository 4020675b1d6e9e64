//go:build integration

package pictures

import (
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The screenshots, taken on the real stack (the dev server's UI, the
// worker processes' metrics, headless Chromium), are pictures: PNGs of the
// window's size or more, with many colours and no one colour covering
// nearly all of them (a blank or error page has a handful).
func TestScreenshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := Screenshots(ctx, Options{OutDir: dir, Dashboard: "../../deploy/helm/fanout/files/dashboard.json", Scale: 0.2, Log: os.Stderr}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file        string
		minW, minH  int
		minBytes    int64
		minColours  int
		maxDominant float64
	}{
		{UIFile, uiWidth, uiHeight - 100, 30_000, 200, 0.9},
		{DashboardFile, PageWidth, 1500, 30_000, 200, 0.9},
	} {
		path := filepath.Join(dir, c.file)
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() < c.minBytes || st.Size() > 600_000 {
			t.Errorf("%s: %d bytes, want %d to 600,000", c.file, st.Size(), c.minBytes)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		b := img.Bounds()
		colours, dominant := colourCount(img)
		t.Logf("%s: %dx%d, %d bytes, %d colours, the commonest on %.0f%% of the pixels", c.file, b.Dx(), b.Dy(), st.Size(), colours, dominant*100)
		if b.Dx() < c.minW || b.Dy() < c.minH {
			t.Errorf("%s: %dx%d, want at least %dx%d", c.file, b.Dx(), b.Dy(), c.minW, c.minH)
		}
		if colours < c.minColours || dominant > c.maxDominant {
			t.Errorf("%s: %d colours, the commonest on %.0f%% of the pixels: a blank page?", c.file, colours, dominant*100)
		}
	}
}

// colourCount counts an image's distinct colours and the share of the
// commonest.
func colourCount(img image.Image) (int, float64) {
	counts := map[[4]uint32]int{}
	b := img.Bounds()
	top := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			k := [4]uint32{r, g, bl, a}
			counts[k]++
			top = max(top, counts[k])
		}
	}
	return len(counts), float64(top) / float64(b.Dx()*b.Dy())
}
