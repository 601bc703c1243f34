/**
 * The Durable side panel: the current notebook's run, its checkpoints, fork tree, waiting gates (its
 * own and its forks'), and its replays' progress.
 */
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { compareCellsUrl, decide, DurableRequestError, getRun, getVersion } from './api';
import { size, took, when } from './cells';
import { NotebookDurable } from './notebook';
import { IForkGate, IForkNode, IGate, IReplay, IRunDetail } from './types';

/** How often the panel asks whether its run changed, while it is visible. */
const POLL_MS = 1500;

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    // textContent only: everything shown here is data.
    node.textContent = text;
  }
  return node;
}

function shown(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A fork's values as one line: `rate=2.0, depth=3`. */
function valuesText(values: { [name: string]: unknown } | undefined): string {
  return Object.entries(values ?? {})
    .map(([name, value]) => `${name}=${typeof value === 'string' ? value : JSON.stringify(value)}`)
    .join(', ');
}

function seconds(value: unknown): number | null {
  if (typeof value === 'number') {
    return value;
  }
  if (typeof value === 'string' && value) {
    const parsed = Date.parse(value);
    return isNaN(parsed) ? null : parsed / 1000;
  }
  return null;
}

/** The panel, following the notebook in focus. */
export class DurablePanel extends Widget {
  constructor(
    private readonly tracker: INotebookTracker,
    private readonly durableOf: (panel: NotebookPanel) => NotebookDurable
  ) {
    super();
    this.id = 'durable-nb-panel';
    this.addClass('durable-nb-panel');
    this.title.caption = 'Durable: the run this notebook works in, its forks and gates';
    this._header = element('div', 'durable-nb-panel-header');
    this._message = element('div', 'durable-nb-panel-message');
    this._body = element('div', 'durable-nb-panel-body');
    this.node.append(element('h2', 'durable-nb-panel-title', 'Durable'), this._header, this._message, this._body);
    tracker.currentChanged.connect(this._follow, this);
    this._follow();
  }

  /** The notebook's durable link the panel shows now. */
  get durable(): NotebookDurable | null {
    return this._durable;
  }

  /** Fetch the run again and show it (one request at a time: calls meanwhile make one more after it). */
  async refresh(): Promise<void> {
    if (this._refreshing) {
      this._again = true;
      return this._refreshing;
    }
    this._refreshing = this._fetch();
    try {
      await this._refreshing;
    } finally {
      this._refreshing = null;
    }
    if (this._again) {
      this._again = false;
      await this.refresh();
    }
  }

  private async _fetch(): Promise<void> {
    const durable = this._durable;
    const found = durable ? await durable.findRun() : null;
    if (durable !== this._durable) {
      return;
    }
    this._target = found ? { runId: found.run_id, store: found.store_key } : null;
    if (!this._target) {
      this._detail = null;
      this._version = null;
      this._render();
      return;
    }
    try {
      const detail = await getRun(this._target.runId, this._target.store);
      if (durable !== this._durable || !this._target || detail.run.run_id !== this._target.runId) {
        return;
      }
      this._detail = detail;
      this._version = String(detail.version);
      this._failure = '';
    } catch (error) {
      this._failure = error instanceof Error ? error.message : String(error);
    }
    this._render();
  }

  protected onAfterShow(_: Message): void {
    void this.refresh();
    this._poll();
  }

  protected onBeforeHide(_: Message): void {
    window.clearTimeout(this._timer);
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  // -- following the notebook and its run --------------------------------------------------------

  private _follow(): void {
    this._durable?.changed.disconnect(this._onChanged, this);
    this._durable?.errors.disconnect(this._onError, this);
    const panel = this.tracker.currentWidget;
    this._durable = panel ? this.durableOf(panel) : null;
    this._durable?.changed.connect(this._onChanged, this);
    this._durable?.errors.connect(this._onError, this);
    this._detail = null;
    this._version = null;
    this._note = '';
    this._render();
    if (this.isVisible) {
      void this.refresh();
    }
  }

  private _onChanged(): void {
    if (this.isVisible) {
      void this.refresh();
    }
  }

  private _onError(_: NotebookDurable, message: string): void {
    this._note = message;
    this._render();
  }

  private _poll(): void {
    window.clearTimeout(this._timer);
    this._timer = window.setTimeout(async () => {
      if (!this.isVisible || this.isDisposed) {
        return;
      }
      const target = this._target;
      if (!target) {
        await this.refresh();
      } else {
        try {
          const version = await getVersion(target.runId, target.store);
          if (version !== this._version) {
            await this.refresh();
          }
        } catch {
          // the next poll tries again
        }
      }
      this._poll();
    }, POLL_MS);
  }

  // -- showing it ------------------------------------------------------------------------------------

  private _render(): void {
    const durable = this._durable;
    const detail = this._detail;
    this._header.replaceChildren();
    this._body.replaceChildren();
    this._message.textContent = this._note || this._failure;
    this._message.hidden = !this._message.textContent;
    if (!durable) {
      this._header.append(element('p', 'durable-nb-empty', 'Open a notebook to see its durable run.'));
      return;
    }
    if (!this._target) {
      this._header.append(
        element(
          'p',
          'durable-nb-empty',
          "This notebook's kernel works in no durable run yet. Run %load_ext durable_nb and %durable run NAME."
        )
      );
      return;
    }
    const run = detail?.run;
    const status = String(run?.status ?? durable.lastRun?.status ?? '');
    const name = String(run?.name ?? durable.lastRun?.name ?? '');
    const title = element('div', 'durable-nb-run');
    title.append(element('span', 'durable-nb-run-name', name), element('span', 'durable-nb-status', status));
    title.dataset.durableStatus = status;
    const id = element('div', 'durable-nb-run-id', `run ${this._target.runId}`);
    this._header.append(title, id);
    if (durable.all) {
      this._header.append(element('div', 'durable-nb-hint', 'every cell runs durably (--all)'));
    }
    if (!durable.run && durable.lastRun) {
      this._header.append(element('div', 'durable-nb-hint', 'the kernel left this run'));
    }
    if (!detail) {
      return;
    }
    this._body.append(this._gates(detail));
    const forkGates = Array.isArray(detail.fork_gates) ? detail.fork_gates : [];
    if (forkGates.length) {
      this._body.append(this._forkGates(forkGates));
    }
    const replays = Array.isArray(detail.replays) ? detail.replays : [];
    if (replays.length) {
      this._body.append(this._replays(replays));
    }
    this._body.append(this._checkpoints(detail), this._forks(detail));
  }

  private _gates(detail: IRunDetail): HTMLElement {
    const section = element('section', 'durable-nb-gates');
    section.append(element('h3', '', `Waiting gates (${detail.gates.length})`));
    if (!detail.gates.length) {
      section.append(element('p', 'durable-nb-empty', 'No gate is waiting.'));
    }
    for (const gate of detail.gates) {
      const box = this._gate(detail.run.run_id, gate, (approved, comment) =>
        this._decide(detail.run.run_id, gate.node, approved, box, comment)
      );
      section.append(box);
    }
    return section;
  }

  /** The gates other runs of the fork tree wait at: a replay's forks, or forks of the kernel's run. */
  private _forkGates(gates: IForkGate[]): HTMLElement {
    const section = element('section', 'durable-nb-fork-gates');
    section.append(element('h3', '', `Gates waiting in forks (${gates.length})`));
    section.append(
      element(
        'p',
        'durable-nb-hint',
        'A decision here is recorded on that fork and runs nothing in this notebook. While the replay\'s ' +
          'background process still runs other forks, it continues the decided fork at once; once it has ' +
          'ended, the fork continues when the same replay runs again (%durable replay … or dnb.replay(...) ' +
          'with the same values): its committed cells restore and the gated cell goes on with the decision.'
      )
    );
    for (const gate of gates) {
      const fork = gate.run;
      const box = this._gate(fork.run_id, gate, (approved, comment) => this._decideFork(gate, approved, box, comment));
      box.classList.add('durable-nb-fork-gate');
      box.dataset.durableRun = fork.run_id;
      const values = valuesText(fork.values);
      const set = values || (fork.overrides.length ? `set ${fork.overrides.join(', ')}` : '');
      const what = fork.replay_of ? 'replay fork' : 'fork';
      const where = element('div', 'durable-nb-gate-fork', [`${what} ${fork.run_id}`, set].filter(Boolean).join(' · '));
      where.title = `run ${fork.run_id} (${fork.name}), forked from ${fork.parent_run_id ?? 'no run'}`;
      box.prepend(where);
      section.append(box);
    }
    return section;
  }

  /** The forks replaying this run's cells (or other runs' of the tree), and how far each got. */
  private _replays(replays: IReplay[]): HTMLElement {
    const section = element('section', 'durable-nb-replays');
    section.append(element('h3', '', `Replays (${replays.length})`));
    const list = element('ul', 'durable-nb-list');
    for (const replay of replays) {
      const item = element('li', 'durable-nb-replay');
      item.dataset.durableRun = replay.run_id;
      item.dataset.durableStatus = replay.status;
      item.dataset.durableProgress = `${replay.done}/${replay.total}`;
      const bar = element('progress', 'durable-nb-replay-progress');
      bar.max = Math.max(replay.total, 1);
      bar.value = replay.done;
      item.append(
        element('span', 'durable-nb-step', valuesText(replay.values) || replay.run_id),
        bar,
        element(
          'span',
          'durable-nb-meta',
          [
            `${replay.done}/${replay.total} cells`,
            replay.status,
            replay.at ? `from ${replay.at}` : '',
            replay.working ? 'a kernel works on it' : ''
          ]
            .filter(Boolean)
            .join(' · ')
        )
      );
      item.title = `run ${replay.run_id}, replaying run ${replay.of ?? '?'}`;
      list.append(item);
    }
    section.append(list);
    const target = this._target;
    const replayed = [...new Set(replays.map(replay => replay.of).filter((of): of is string => !!of))];
    for (const of of target ? replayed : []) {
      const text = replayed.length > 1 ? `Compare the replays of ${of}` : 'Compare the replays';
      section.append(compareLink(text, of, target!.store, 'compare-replays', 'replayed run'));
    }
    return section;
  }

  /** One gate's box; ``onDecide`` records the decision and says whether it was recorded. */
  private _gate(
    runId: string,
    gate: IGate,
    onDecide: (approved: boolean, comment: string) => Promise<boolean>
  ): HTMLElement {
    const box = element('div', 'durable-nb-gate');
    const commentKey = `${runId} ${gate.node}`;
    box.dataset.durableNode = gate.node;
    if (gate.checkpoint_id) {
      box.dataset.durableCheckpoint = gate.checkpoint_id;
    }
    box.append(
      element('div', 'durable-nb-gate-reason', gate.reason),
      element('div', 'durable-nb-gate-where', `cell '${gate.node}' · since ${when(seconds(gate.created_at))}`)
    );
    if (gate.expires_at !== null && gate.expires_at !== undefined) {
      box.append(element('div', 'durable-nb-gate-where', `expires ${when(seconds(gate.expires_at))}`));
    }
    if (gate.context !== null && gate.context !== undefined) {
      box.append(element('pre', 'durable-nb-gate-context', shown(gate.context)));
    }
    const comment = element('textarea', 'durable-nb-comment');
    comment.placeholder = 'Comment (optional)';
    comment.rows = 2;
    comment.value = this._comments.get(commentKey) ?? '';
    comment.addEventListener('input', () => this._comments.set(commentKey, comment.value));
    const buttons = element('div', 'durable-nb-actions');
    for (const [action, label] of [
      ['approve', 'Approve'],
      ['reject', 'Reject']
    ] as const) {
      const button = element('button', `jp-Button durable-nb-button durable-nb-${action}`, label);
      button.dataset.durableAction = action;
      button.addEventListener('click', () => {
        box.querySelectorAll('button').forEach(button => ((button as HTMLButtonElement).disabled = true));
        const text = (this._comments.get(commentKey) ?? '').trim();
        void onDecide(action === 'approve', text).then(recorded => recorded && this._comments.delete(commentKey));
      });
      buttons.append(button);
    }
    box.append(comment, buttons);
    return box;
  }

  private async _decide(
    runId: string,
    node: string,
    approved: boolean,
    box: HTMLElement,
    comment: string
  ): Promise<boolean> {
    const target = this._target;
    const durable = this._durable;
    if (!target || !durable) {
      return false;
    }
    let recorded = false;
    const gate = box.dataset.durableCheckpoint || null;
    try {
      await decide(runId, target.store, node, approved, comment || null, gate);
      recorded = true;
      const verdict = `${approved ? 'Approved' : 'Rejected'} the gate of cell '${node}'.`;
      // Only this click continues the notebook (a decision made elsewhere never runs cells here),
      // and only in the notebook whose idle kernel works in that run: the cell sees the decision.
      if (durable === this._durable && durable.continueAt(runId, target.store, node)) {
        this._note = `${verdict} Continuing the notebook from that cell.`;
      } else {
        this._note = `${verdict} Run the notebook again (Run All) to continue: committed cells restore.`;
        this._offerRunAll = true;
      }
    } catch (error) {
      this._note = refusalNote(error);
    }
    await this.refresh();
    return recorded;
  }

  /** Decide a gate a fork waits at: recorded on that fork; nothing runs in this notebook. */
  private async _decideFork(gate: IForkGate, approved: boolean, box: HTMLElement, comment: string): Promise<boolean> {
    const target = this._target;
    if (!target) {
      return false;
    }
    const fork = gate.run;
    let recorded = false;
    try {
      await decide(fork.run_id, target.store, gate.node, approved, comment || null, gate.checkpoint_id);
      recorded = true;
      const verdict = `${approved ? 'Approved' : 'Rejected'} the gate of cell '${gate.node}' in fork ${fork.run_id}.`;
      this._note = fork.replay_of
        ? `${verdict} Its replay's process continues it if still running; else run the same replay again.`
        : `${verdict} Switch to that fork (fork tree below) and Run All to continue it.`;
    } catch (error) {
      box.querySelectorAll('button').forEach(button => ((button as HTMLButtonElement).disabled = false));
      this._note = refusalNote(error);
    }
    await this.refresh();
    return recorded;
  }

  private _checkpoints(detail: IRunDetail): HTMLElement {
    const section = element('section', 'durable-nb-checkpoints');
    section.append(element('h3', '', `Checkpoints (${detail.checkpoints.length})`));
    const list = element('ol', 'durable-nb-list');
    for (const checkpoint of detail.checkpoints) {
      const step = String(checkpoint.step ?? checkpoint.node_id ?? checkpoint.checkpoint_id ?? '');
      const item = element('li', 'durable-nb-checkpoint');
      const details = [
        when(seconds(checkpoint.created_at)),
        took(typeof checkpoint.duration === 'number' ? checkpoint.duration : null),
        typeof checkpoint.bytes === 'number' ? size(checkpoint.bytes) : ''
      ].filter(Boolean);
      item.append(element('span', 'durable-nb-step', step), element('span', 'durable-nb-meta', details.join(' · ')));
      list.append(item);
    }
    section.append(list);
    if (this._offerRunAll && this._durable) {
      const again = element('button', 'jp-Button durable-nb-button', 'Run All to continue');
      again.dataset.durableAction = 'run-all';
      const panel = this._durable.panel;
      again.addEventListener('click', () => {
        this._offerRunAll = false;
        void NotebookActions.runAll(panel.content, panel.sessionContext);
      });
      section.prepend(again);
    }
    return section;
  }

  private _forks(detail: IRunDetail): HTMLElement {
    const section = element('section', 'durable-nb-forks');
    section.append(element('h3', '', 'Fork tree'));
    const current = this._durable?.run?.run_id ?? null;
    const tree = (nodes: IForkNode[]): HTMLElement => {
      const list = element('ul', 'durable-nb-tree');
      for (const node of nodes) {
        const item = element('li', 'durable-nb-fork');
        // A run by its name (forks keep their source's); its id only when it has none, and in the tooltip.
        const label = typeof node.name === 'string' && node.name ? node.name : node.run_id;
        const overrides = Array.isArray(node.overrides) ? node.overrides.map(String) : [];
        const button = element('button', 'durable-nb-fork-button');
        button.append(
          element('span', 'durable-nb-fork-name', label),
          element(
            'span',
            'durable-nb-meta',
            [
              node.status,
              typeof node.fork_step === 'string' && node.fork_step ? `from ${node.fork_step}` : '',
              overrides.length ? `set ${overrides.join(', ')}` : ''
            ]
              .filter(Boolean)
              .join(' · ')
          )
        );
        button.dataset.durableRun = node.run_id;
        if (node.run_id === current) {
          button.classList.add('durable-nb-current');
          button.disabled = true;
          button.title = `run ${node.run_id}: the kernel works in this run`;
        } else {
          button.title = `run ${node.run_id}: switch the kernel to this run; its cells restore from it when they run`;
          button.addEventListener('click', () => {
            if (!this._durable?.switchTo(node.run_id)) {
              this._note = 'The kernel is not connected: run %load_ext durable_nb in it first.';
              this._render();
            }
          });
        }
        item.append(button);
        if (Array.isArray(node.children) && node.children.length) {
          item.append(tree(node.children));
        }
        list.append(item);
      }
      return list;
    };
    const roots = Array.isArray(detail.forks) ? detail.forks : [];
    section.append(tree(roots));
    const root = roots.length ? roots[0].run_id : null;
    const anyForks = roots.some(node => Array.isArray(node.children) && node.children.length > 0);
    if (root && anyForks && this._target) {
      // A page of the server extension, in a tab of its own: the whole tree's cells, outputs side by side.
      section.append(compareLink('Compare cells of these runs', root, this._target.store, 'compare-cells', 'run'));
    }
    return section;
  }

  private _refreshing: Promise<void> | null = null;
  private _again = false;
  private _durable: NotebookDurable | null = null;
  private _target: { runId: string; store: string } | null = null;
  private _detail: IRunDetail | null = null;
  private _version: string | null = null;
  private _failure = '';
  private _note = '';
  private _offerRunAll = false;
  private _comments = new Map<string, string>();
  private _timer = 0;
  private readonly _header: HTMLElement;
  private readonly _message: HTMLElement;
  private readonly _body: HTMLElement;
}

/** A link to the server's page of ``runId``'s cells beside its forks', in a tab of its own. */
function compareLink(text: string, runId: string, store: string, action: string, what: string): HTMLAnchorElement {
  const link = element('a', 'durable-nb-compare', text);
  link.href = compareCellsUrl(runId, store);
  link.target = '_blank';
  link.rel = 'noopener noreferrer';
  link.dataset.durableAction = action;
  link.title = `Each cell of the ${what} and its forks side by side, the cells whose outputs or values differ marked`;
  return link;
}

/** What the panel says when a decision was not recorded: decided already, or why not. */
function refusalNote(error: unknown): string {
  return error instanceof DurableRequestError && error.status === 409
    ? `Already decided: ${error.message}`
    : `Could not record the decision: ${error instanceof Error ? error.message : String(error)}`;
}
