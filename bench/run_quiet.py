#!/usr/bin/env python3
"""Runs Google Benchmark cases one at a time on a shared machine, only while the rest of the machine is idle.

Before each case it samples /proc/stat for one second and waits until the other processes used less than
--max-busy of the CPUs; it runs the cases of each round in a shuffled order (so slow phases of the machine do
not always hit the same variant), --rounds times, and prints the median of each counter per case.

  bench/run_quiet.py build/bench/bench_attention 'triad' 'decode/f16/kv8192/b1/' 'decode/int8/kv8192/b1/'

With --pairs, the cases are pairs A B: each round runs A and B back to back (in a random order), and the
median over rounds of time(A) / time(B) is printed per pair, so a drift of the machine between rounds
cancels out of the ratio.

  bench/run_quiet.py build/bench/bench_attention --pairs 'decode/f16/kv8192/b1/' 'decode/int8/kv8192/b1/'
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time


def busy_share(seconds=1.0):
    def sample():
        with open('/proc/stat') as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def run_case(binary, case, min_time):
    with tempfile.NamedTemporaryFile(suffix='.json') as out:
        subprocess.run([binary, f'--benchmark_filter={case}', f'--benchmark_min_time={min_time}',
                        f'--benchmark_out={out.name}', '--benchmark_out_format=json'],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out.name))['benchmarks']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('cases', nargs='+', help='--benchmark_filter regexes, one case each')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--min-time', type=float, default=0.5)
    ap.add_argument('--max-busy', type=float, default=0.08, help='share of all CPUs others may use')
    ap.add_argument('--json', help='write the medians here')
    ap.add_argument('--pairs', action='store_true', help='cases are pairs A B: print median time(A) / time(B)')
    args = ap.parse_args()
    if args.pairs and len(args.cases) % 2 != 0:
        ap.error('--pairs needs an even number of cases')
    groups = [args.cases[i:i + 2] for i in range(0, len(args.cases), 2)] if args.pairs else [[c] for c in args.cases]
    results = {}
    ratios = {}  # (A, B) -> per-round time(A) / time(B)
    for r in range(args.rounds):
        random.shuffle(groups)
        for group in groups:
            order = random.sample(group, len(group))
            times = {}
            for case in order:
                while busy_share() > args.max_busy:
                    time.sleep(2)
                for b in run_case(args.binary, case, args.min_time):
                    results.setdefault(b['name'], []).append(b)
                    times[case] = b['real_time']
            if args.pairs and len(times) == 2:
                ratios.setdefault(tuple(group), []).append(times[group[0]] / times[group[1]])
        print(f'round {r + 1}/{args.rounds} done', file=sys.stderr)
    medians = {}
    for name, runs in results.items():
        keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and k not in ('repetitions', 'threads')]
        medians[name] = {k: statistics.median(run[k] for run in runs) for k in keys}
        medians[name]['label'] = runs[0].get('label', '')
        medians[name]['runs'] = len(runs)
        m = medians[name]
        extra = ' '.join(f'{k}={m[k]:.4g}' for k in ('bytes_per_second', 'bw_share', 'triad_GBps', 'FLOP/s') if k in m)
        print(f"{name:45s} {m['real_time']:12.1f} {runs[0]['time_unit']}  {extra}  [{m['label']}]")
    for (a, b), v in ratios.items():
        print(f'{a} / {b}: median time ratio {statistics.median(v):.3f} '
              f'(rounds: {" ".join(f"{x:.2f}" for x in v)})')
    if args.json:
        json.dump(medians, open(args.json, 'w'), indent=1)


if __name__ == '__main__':
    main()
