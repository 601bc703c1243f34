/**
 * The messages of the `durable_nb` comm and the shapes the server extension answers with.
 */

/** The run a kernel is attached to. */
export interface IRun {
  run_id: string;
  name: string;
  status: string;
  parent_run_id: string | null;
  store_key: string;
}

/** A durable cell's state as the kernel reports it. */
export type KernelState = 'committed' | 'restored' | 'running' | 'paused' | 'failed';

/** What a cell reads: the kernel's state, or stale when its source changed since. */
export type DisplayState = KernelState | 'stale';

/** One durable cell's last state. */
export interface ICellState {
  cell_id: string | null;
  node: string;
  state: KernelState;
  run_id: string;
  at: number | null;
  duration: number | null;
  bytes: number | null;
  gate: string | null;
}

/** A message from the kernel. */
export type KernelMessage =
  | {
      type: 'snapshot';
      run: IRun | null;
      all: boolean;
      cells: { [cellId: string]: ICellState };
    }
  | { type: 'run'; run: IRun | null; all: boolean }
  | { type: 'cell'; cell: ICellState }
  | { type: 'error'; message: string };

/** A gate a run waits at. */
export interface IGate {
  node: string;
  reason: string;
  context: unknown;
  created_at: number | null;
  expires_at: number | null;
  checkpoint_id: string | null;
}

/** A run in the fork tree. */
export interface IForkNode {
  run_id: string;
  name?: string | null;
  status?: string;
  fork_step?: string | null;
  overrides?: string[];
  children?: IForkNode[];
  [other: string]: unknown;
}

/** The fork a gate of another run of the tree waits in (a replay's fork, say). */
export interface IGateFork {
  run_id: string;
  name: string;
  parent_run_id: string | null;
  overrides: string[];
  values: { [name: string]: unknown };
  replay_of: string | null;
}

/** A gate another run of the fork tree waits at. */
export interface IForkGate extends IGate {
  run: IGateFork;
}

/** One fork of a replay and how far it got. */
export interface IReplay {
  run_id: string;
  of: string | null;
  at: string | null;
  values: { [name: string]: unknown };
  status: string;
  done: number;
  total: number;
  working: boolean;
}

/** What `GET /durable/api/runs/<run_id>` answers. */
export interface IRunDetail {
  run: { run_id: string; name?: string; status?: string; [other: string]: unknown };
  checkpoints: Array<{ [field: string]: unknown }>;
  forks: IForkNode[];
  gates: IGate[];
  fork_gates?: IForkGate[];
  replays?: IReplay[];
  version: string;
}
