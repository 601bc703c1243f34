/**
 * One notebook's link to its kernel's durable session: the comm, the cells' states, stale cells.
 */
import { Cell } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { getKernel, staleCells } from './api';
import { showState } from './cells';
import { DisplayState, ICellState, IRun, KernelMessage } from './types';

/** The kernel's comm target, registered by `%load_ext durable_nb`. */
export const TARGET = 'durable_nb';

// How long after the last keystroke an edited cell is checked against its committed code.
const STALE_DELAY_MS = 600;
// The cell-info messages kept while no comm is open (a Run All of a long notebook), at most.
const MAX_WAITING = 5000;
// How long to wait for the comm's subshell before opening it on the main shell anyway.
const SUBSHELL_WAIT_MS = 5000;

/**
 * Resolve once the comm's own subshell is ready, when the kernel has subshells (JupyterLab 4.4+
 * puts comms on them): its messages are then answered at once, even while a Run All's cells
 * are queued on the main shell, so that their states show as they run.
 */
async function whenSubshell(kernel: Kernel.IKernelConnection, comm: Kernel.IComm): Promise<void> {
  try {
    await kernel.info;
  } catch {
    return;
  }
  const started = (comm as any).subshellStarted as Promise<void> | undefined;
  if (!(kernel as any).supportsSubshells || !started || (comm as any).commsOverSubshells === 'disabled') {
    return;
  }
  await Promise.race([started.catch(() => undefined), new Promise(resolve => setTimeout(resolve, SUBSHELL_WAIT_MS))]);
}

/** The durable side of one notebook panel. */
export class NotebookDurable implements IDisposable {
  constructor(readonly panel: NotebookPanel) {
    panel.sessionContext.statusChanged.connect(this._onStatus, this);
    panel.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    NotebookActions.executionScheduled.connect(this._onScheduled, this);
    NotebookActions.executed.connect(this._onExecuted, this);
    void panel.context.ready.then(() => {
      if (!this._disposed) {
        panel.model?.contentChanged.connect(this._onContent, this);
        panel.model?.cells.changed.connect(this._showAll, this);
        this._open();
      }
    });
  }

  /** The run the kernel works in (null: none, or not known yet). */
  get run(): IRun | null {
    return this._run;
  }

  /** The run the kernel worked in last, kept after `%durable end` so the panel still shows it. */
  get lastRun(): IRun | null {
    return this._run ?? this._lastRun;
  }

  /** Whether the kernel runs every cell durably (`%durable run NAME --all`). */
  get all(): boolean {
    return this._all;
  }

  /** Whether a comm to the kernel's durable session is open. */
  get connected(): boolean {
    return this._comm !== null && this._confirmed;
  }

  /** Emits when the run, a cell's state or the connection changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emits the kernel's answer to a request it refused. */
  get errors(): ISignal<this, string> {
    return this._errors;
  }

  /** The last state of each durable cell, by cell id. */
  get states(): ReadonlyMap<string, ICellState> {
    return this._states;
  }

  /** What a cell reads now, or null for a cell never run durably. */
  displayState(cellId: string): DisplayState | null {
    if (this._stale.has(cellId)) {
      return 'stale';
    }
    return this._states.get(cellId)?.state ?? null;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    window.clearTimeout(this._staleTimer);
    Signal.clearData(this);
    NotebookActions.executionScheduled.disconnect(this._onScheduled, this);
    NotebookActions.executed.disconnect(this._onExecuted, this);
    this._dropComm();
  }

  /**
   * Run the cell paused at a run's gate again, then the cells below it, as Run All would from there.
   * Only when this notebook's kernel works in that run and is idle; says whether it started.
   */
  continueAt(runId: string, store: string, node: string): boolean {
    const kernel = this.panel.sessionContext.session?.kernel;
    if (this._run?.run_id !== runId || this._run.store_key !== store || kernel?.status !== 'idle') {
      return false;
    }
    const notebook = this.panel.content;
    const index = notebook.widgets.findIndex(widget => {
      const cell = this._states.get(widget.model.id);
      return cell?.state === 'paused' && cell.node === node && cell.run_id === runId;
    });
    if (index < 0) {
      return false;
    }
    notebook.activeCellIndex = index;
    notebook.deselectAll();
    void NotebookActions.runAllBelow(notebook, this.panel.sessionContext);
    return true;
  }

  /** Ask the kernel to work in another run (a fork), as `%durable switch RUN` does. */
  switchTo(runId: string): boolean {
    return this._send({ type: 'switch', run_id: runId });
  }

  /** The run to show: the kernel's, else the one its registry entry names (read through the server). */
  async findRun(): Promise<{ run_id: string; store_key: string } | null> {
    const run = this.lastRun;
    if (run) {
      return run;
    }
    const kernel = this.panel.sessionContext.session?.kernel;
    if (!kernel) {
      return null;
    }
    try {
      return await getKernel(kernel.id);
    } catch {
      return null;
    }
  }

  // -- the comm --------------------------------------------------------------------------------

  private _open(): void {
    const kernel = this.panel.sessionContext.session?.kernel;
    if (this._disposed || this._comm || !this._wanted || !kernel || kernel.isDisposed) {
      return;
    }
    const status = kernel.status;
    if (status === 'dead' || status === 'restarting' || status === 'autorestarting' || status === 'starting') {
      return;
    }
    // One attempt per kernel start and per cell that loads durable_nb: before `%load_ext durable_nb`
    // the kernel has no such target and closes the comm.
    this._wanted = false;
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(TARGET);
    } catch {
      return;
    }
    comm.onMsg = message => this._received(comm, message.content.data as unknown as KernelMessage);
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null;
        this._opened = false;
        this._confirmed = false;
        this._changed.emit();
      }
    };
    this._comm = comm;
    this._opened = false;
    this._confirmed = false;
    void whenSubshell(kernel, comm).then(() => {
      if (this._comm !== comm || comm.isDisposed) {
        return;
      }
      try {
        comm.open({ type: 'hello' });
      } catch {
        this._comm = null;
        return;
      }
      this._opened = true;
      // The cells a Run All scheduled before the comm could open: their tags reach the kernel
      // before it runs them, the comm being on a subshell of its own.
      const waiting = this._waiting.splice(0);
      for (const info of waiting) {
        this._send(info);
      }
    });
  }

  private _dropComm(): void {
    const comm = this._comm;
    this._comm = null;
    this._opened = false;
    this._confirmed = false;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        comm.dispose();
      }
    }
  }

  private _send(data: { [key: string]: string | string[] }): boolean {
    if (!this._comm || this._comm.isDisposed || !this._opened) {
      return false;
    }
    try {
      this._comm.send(data);
      return true;
    } catch {
      return false;
    }
  }

  private _received(comm: Kernel.IComm, message: KernelMessage): void {
    if (comm !== this._comm || !message || typeof message !== 'object') {
      return;
    }
    this._confirmed = true;
    switch (message.type) {
      case 'snapshot':
        this._setRun(message.run, message.all);
        for (const cell of Object.values(message.cells || {})) {
          this._setCell(cell);
        }
        break;
      case 'run':
        this._setRun(message.run, message.all);
        break;
      case 'cell':
        this._setCell(message.cell);
        break;
      case 'error':
        this._errors.emit(String(message.message));
        break;
      default:
        return;
    }
    this._changed.emit();
  }

  private _setRun(run: IRun | null, all: boolean): void {
    if (this._run) {
      this._lastRun = this._run;
    }
    this._run = run;
    this._all = !!all;
  }

  private _setCell(cell: ICellState): void {
    if (!cell || typeof cell.cell_id !== 'string') {
      return;
    }
    this._states.set(cell.cell_id, cell);
    this._stale.delete(cell.cell_id);
    const widget = this._widget(cell.cell_id);
    if (widget) {
      this._committed.set(cell.cell_id, widget.model.sharedModel.getSource());
      showState(widget, this.displayState(cell.cell_id), cell);
    }
  }

  // -- the kernel's life -------------------------------------------------------------------------

  private _onStatus(): void {
    const status = this.panel.sessionContext.session?.kernel?.status;
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead' || status === 'starting') {
      // A new kernel process holds no comm: open one when it is ready (after `%load_ext durable_nb`).
      this._comm = null;
      this._opened = false;
      this._confirmed = false;
      this._wanted = true;
      this._waiting = [];
      this._changed.emit();
    } else if (status === 'idle') {
      this._open();
    }
  }

  private _onKernelChanged(): void {
    this._comm = null;
    this._opened = false;
    this._confirmed = false;
    this._run = null;
    this._wanted = true;
    this._waiting = [];
    this._changed.emit();
    this._open();
  }

  private _onScheduled(_: unknown, args: { notebook: unknown; cell: Cell }): void {
    if (args.notebook !== this.panel.content || args.cell.model.type !== 'code') {
      return;
    }
    const tags = args.cell.model.getMetadata('tags');
    const info = {
      type: 'cell-info',
      cell_id: args.cell.model.id,
      tags: Array.isArray(tags) ? tags.filter(t => typeof t === 'string') : []
    };
    if (!this._send(info) && this._waiting.length < MAX_WAITING) {
      this._waiting.push(info);
    }
  }

  private _onExecuted(_: unknown, args: { notebook: unknown; cell: Cell }): void {
    if (
      args.notebook === this.panel.content &&
      !this._comm &&
      args.cell.model.sharedModel.getSource().includes('durable_nb')
    ) {
      this._wanted = true;
      this._open();
    }
  }

  // -- cells --------------------------------------------------------------------------------------

  private _widget(cellId: string): Cell | undefined {
    return this.panel.content.widgets.find(widget => widget.model.id === cellId);
  }

  private _showAll(): void {
    for (const widget of this.panel.content.widgets) {
      const id = widget.model.id;
      const cell = this._states.get(id) ?? null;
      if (cell || widget.node.dataset.durableState) {
        showState(widget, this.displayState(id), cell);
      }
    }
  }

  private _onContent(): void {
    window.clearTimeout(this._staleTimer);
    this._staleTimer = window.setTimeout(() => void this._checkStale(), STALE_DELAY_MS);
  }

  private async _checkStale(): Promise<void> {
    const candidates: Array<{ cell_id: string; node: string; source: string }> = [];
    const unchanged: string[] = [];
    for (const widget of this.panel.content.widgets) {
      const id = widget.model.id;
      const cell = this._states.get(id);
      if (!cell || (cell.state !== 'committed' && cell.state !== 'restored')) {
        continue;
      }
      const source = widget.model.sharedModel.getSource();
      if (source === this._committed.get(id)) {
        unchanged.push(id);
      } else {
        candidates.push({ cell_id: id, node: cell.node, source });
      }
    }
    let stale = new Set(candidates.map(c => c.cell_id));
    const run = this.lastRun;
    if (candidates.length && run) {
      try {
        // The server says whether the code differs from the committed code (comments and
        // formatting aside); without it, any edit counts.
        stale = new Set(await staleCells(run.run_id, run.store_key, candidates));
      } catch {
        // keep the local answer
      }
    }
    if (this._disposed) {
      return;
    }
    for (const id of [...unchanged, ...candidates.map(c => c.cell_id)]) {
      const before = this._stale.has(id);
      if (stale.has(id)) {
        this._stale.add(id);
      } else {
        this._stale.delete(id);
      }
      if (before !== this._stale.has(id)) {
        const widget = this._widget(id);
        if (widget) {
          showState(widget, this.displayState(id), this._states.get(id) ?? null);
        }
      }
    }
    this._changed.emit();
  }

  private _comm: Kernel.IComm | null = null;
  private _opened = false;
  private _confirmed = false;
  private _wanted = true;
  private _waiting: Array<{ [key: string]: string | string[] }> = [];
  private _disposed = false;
  private _run: IRun | null = null;
  private _lastRun: IRun | null = null;
  private _all = false;
  private _states = new Map<string, ICellState>();
  private _committed = new Map<string, string>();
  private _stale = new Set<string>();
  private _staleTimer = 0;
  private _changed = new Signal<this, void>(this);
  private _errors = new Signal<this, string>(this);
}
