package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
)

// From here to the tests, docs/stock.md's program, word for word
// (TestTheStockGuideIsThisCode).

// Item is one line of an order.
type Item struct {
	SKU string
	Qty int64
}

// ErrOutOfStock is PlaceOrder's error when an item has fewer left than ordered.
var ErrOutOfStock = errors.New("out of stock")

// takeStock takes ARGV[1] from the count in KEYS[1], never below zero.
var takeStock = guard.NewScript(`
	local left = tonumber(redis.call('GET', KEYS[1]) or '0')
	if left < tonumber(ARGV[1]) then
		return redis.error_reply('OUTOFSTOCK ' .. left .. ' left')
	end
	return redis.call('DECRBY', KEYS[1], ARGV[1])`)

// PlaceOrder takes every item of order from its count ("stock:SKU"), or none
// when one has fewer left than ordered. Each SKU has its own lock
// ("lock:stock:SKU"), and every write to its count goes through the guard
// with that lock's fence.
func PlaceOrder(ctx context.Context, locks *dlock.Client, rdb *redis.Client, stock *guard.Redis, order []Item) error {
	keys := make([]string, len(order))
	for i, it := range order {
		keys[i] = "lock:stock:" + it.SKU
	}
	held, err := locks.LockAll(ctx, keys, dlock.WithTTL(10*time.Second))
	if err != nil {
		return err // none held: ctx ended while others held one, or Redis trouble
	}
	defer locks.UnlockAll(context.Background(), held)

	// Check every item first: while the locks are held, no other order
	// changes the counts.
	for _, it := range order {
		left, err := rdb.Get(ctx, "stock:"+it.SKU).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if left < it.Qty {
			return fmt.Errorf("%w: %s has %d, %d ordered", ErrOutOfStock, it.SKU, left, it.Qty)
		}
	}
	// Then take them, each with its own lock's fence (held[i] is keys[i]'s).
	for i, it := range order {
		_, err := stock.For(held[i]).Run(ctx, takeStock, []string{"stock:" + it.SKU}, it.Qty)
		switch {
		case errors.Is(err, guard.ErrStaleFence): // refused: a newer holder has written
		case errors.Is(err, dlock.ErrLost): // not sent: the lease ended first (a pause past the TTL)
		}
		if err != nil {
			// The items before i are taken: the order stands half done,
			// to be given back or completed under new locks.
			return fmt.Errorf("order taken up to %s only: %w", it.SKU, err)
		}
	}
	return nil
}

// The tests and the example of docs/stock.md.

// docs/stock.md's program is the code above, word for word.
func TestTheStockGuideIsThisCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/stock.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("stock_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```go\npackage shop\n")
	block, _, _ = strings.Cut(block, "```")
	_, body, found := strings.Cut(block, "\n)\n\n") // after the imports
	if !ok || !found || len(body) < 500 {
		t.Fatalf("no program in docs/stock.md (%d bytes after its imports)", len(body))
	}
	if !strings.Contains(string(self), body) {
		t.Fatal("docs/stock.md's program differs from guard/stock_test.go's copy: make them one again")
	}
}

// Orders placed at once by many goroutines, each over several SKUs in any
// order, never take a count below zero, and every count ends at its start
// less what the orders that succeeded took: none is lost or taken twice.
func TestOrdersNeverOversellStock(t *testing.T) {
	c, rdb := newClient(t, shared)
	stock := guard.NewRedis(rdb)
	base := key(t)
	skus := []string{base + ":apple", base + ":pear", base + ":plum"}
	const start = 25
	for _, sku := range skus {
		if err := rdb.Set(ctxT(t), "stock:"+sku, start, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var taken [3]atomic.Int64
	var placed, refused atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 30 {
				lines := rand.Perm(len(skus))[:1+rand.IntN(len(skus))]
				order := make([]Item, len(lines))
				for i, j := range lines {
					order[i] = Item{SKU: skus[j], Qty: 1 + rand.Int64N(3)}
				}
				err := PlaceOrder(ctxT(t), c, rdb, stock, order)
				switch {
				case err == nil:
					placed.Add(1)
					for i, j := range lines {
						taken[j].Add(order[i].Qty)
					}
				case errors.Is(err, ErrOutOfStock):
					refused.Add(1)
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d orders placed, %d refused for stock", placed.Load(), refused.Load())
	if placed.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("%d orders placed, %d refused: the stock should have run out", placed.Load(), refused.Load())
	}
	for j, sku := range skus {
		left, err := rdb.Get(ctxT(t), "stock:"+sku).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if left < 0 || left != start-taken[j].Load() {
			t.Errorf("%s: %d left after orders took %d of %d", sku, left, taken[j].Load(), start)
		}
	}
}

// Two orders against the stock of docs/stock.md: the first is taken whole,
// the second, which asks for more pears than are left, not at all.
func Example_stock() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	stock := guard.NewRedis(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb.Set(ctx, "stock:example-apple", 5, 0)
	rdb.Set(ctx, "stock:example-pear", 2, 0)

	err := PlaceOrder(ctx, locks, rdb, stock, []Item{{"example-apple", 2}, {"example-pear", 1}})
	fmt.Println("first order:", err)
	err = PlaceOrder(ctx, locks, rdb, stock, []Item{{"example-apple", 1}, {"example-pear", 3}})
	fmt.Println("second order:", err)
	fmt.Println("apples left:", rdb.Get(ctx, "stock:example-apple").Val())
	fmt.Println("pears left:", rdb.Get(ctx, "stock:example-pear").Val())
	// Output:
	// first order: <nil>
	// second order: out of stock: example-pear has 1, 3 ordered
	// apples left: 3
	// pears left: 1
}
